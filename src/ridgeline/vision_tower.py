"""A multimodal checkpoint's vision tower, from its ``vision_config``: the parameters a serving
engine loads beside the text model (``vision_params``: a ViT's, or Llama-4's tiling tower's),
and the image it profiles the tower with (``vision_item``). A tower described in a layout not
read here (a field it needs absent) is left uncounted; a field given malformed (a string, a
size of 0, a patch larger than the image) is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping

from ridgeline.config_fields import ConfigFields, MissingField
from ridgeline.datafiles import model_type_defaults
from ridgeline.errors import InputError
from ridgeline.model import VisionConfig, VisionItem


def vision_item(config: ConfigFields) -> VisionItem | None:
    """The image a serving engine profiles the tower with: a fixed-size tower's
    (vision_config's image_size and patch_size, the top-level mm_tokens_per_image), a tiling
    tower's (Llama-4's: ``llama4_item``), or, for a tower that takes any size (Qwen's), the
    processor's largest image (model_type_defaults.json vision_max_pixels, over (patch ×
    spatial merge)² pixels a token); None without a tower, or for one whose largest image is
    not known."""
    vision = config.raw.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    tokens = ConfigFields({"mm_tokens_per_image": config.raw.get("mm_tokens_per_image")},
                          config.name, defaults=False, decoder=False).opt_int(
                              "mm_tokens_per_image")
    v = ConfigFields(vision, f"{config.name} vision_config", defaults=False, decoder=False)
    outer = config.raw.get("model_type")  # the multimodal wrapper's, not its text model's
    wrapper = model_type_defaults(str(outer or config.model_type))
    max_pixels = wrapper.get("vision_max_pixels")
    try:
        if is_llama4_tower(v):
            return llama4_item(v, wrapper.get("vision_max_tiles"))
        if tokens is not None:
            side = patches_per_side(v)
            patches = side * side
        elif isinstance(max_pixels, int):
            merge = v.int_("spatial_merge_size")
            tokens = max_pixels // (v.int_("patch_size") * merge) ** 2
            patches = tokens * merge * merge
        else:
            return None
        return VisionItem(patches, v.int_("hidden_size"), v.int_("intermediate_size"),
                          tokens)
    except MissingField:
        return None


def patches_per_side(v: ConfigFields) -> int:
    """image_size ÷ patch_size, the patches along one side of the image the tower takes
    (Gemma-3's SigLIP: 896 ÷ 14 = 64); a patch larger than the image is refused."""
    image, patch = v.int_("image_size"), v.int_("patch_size")
    if patch > image:
        raise InputError(f"{v.name}: patch_size ({patch}) exceeds image_size ({image}): the "
                         "image holds no whole patch")
    return image // patch


def llama4_item(v: ConfigFields, max_tiles: object) -> VisionItem | None:
    """Llama-4's profiled image: the processor's max_patches tiles of image_size² (16; vLLM's
    dummy image is 16 tiles tall, its most features) and the global tile a many-tile image
    adds; each tile runs (image_size ÷ patch_size)² patches and a class token through the
    tower and gives the text model its patches ÷ the pixel shuffle's factor. Scout's: 17
    tiles × 577 = 9,809 patches, 17 × 144 = 2,448 tokens (vllm mllama4.py
    get_image_size_with_most_features, get_patch_per_chunk). None where max_tiles is unknown."""
    if not isinstance(max_tiles, int) or isinstance(max_tiles, bool) or max_tiles < 1:
        return None
    side = patches_per_side(v)
    tiles = max_tiles + 1 if max_tiles > 1 else 1  # a global tile beside two or more
    return VisionItem(tiles * (side * side + 1),  # + 1: the class token
                      v.int_("hidden_size"), v.int_("intermediate_size"),
                      tiles * (side * side // pixel_shuffle_factor(v)))


def vision_config(config: ConfigFields) -> VisionConfig | None:
    """The vision_config's num_hidden_layers and hidden_size as named (None without a
    vision_config); a value that is not a whole number reads as unnamed."""
    vision = config.raw.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    v = ConfigFields(vision, f"{config.name} vision_config", defaults=False, decoder=False)
    named = []
    for key in ("num_hidden_layers", "hidden_size"):
        try:
            named.append(v.opt_int(key))
        except InputError:
            named.append(None)
    return VisionConfig(*named)


def vision_params(config: ConfigFields, text_hidden: int) -> int:
    """The vision tower's parameters, from vision_config (0 without one)."""
    vision = config.raw.get("vision_config")
    if vision is None:
        return 0
    if not isinstance(vision, Mapping):
        raise InputError(f"{config.name}: vision_config must be a JSON object")
    try:
        v = ConfigFields(vision, f"{config.name} vision_config", defaults=False, decoder=False)
        if is_llama4_tower(v):
            return llama4_params(v, text_hidden)
        kinds = {config.raw.get("model_type"), v.c.get("model_type")}
        return vit_params(v, text_hidden, gated=bool(kinds & GATED_VISION_TYPES))
    except MissingField:  # a tower described in a layout not read here: left uncounted
        return 0


# Vision towers whose blocks run a gated MLP (gate, up, down, each with a bias) under two
# RMSNorms, their merger's norm an RMSNorm too, rather than fc1/fc2 under LayerNorms:
# Qwen2.5-VL's (transformers modeling_qwen2_5_vl.py Qwen2_5_VLVisionBlock: Qwen2RMSNorm norm1,
# norm2 and Qwen2_5_VLMLP(config, bias=True); SGLang qwen2_5_vl.py Qwen2_5_VLMLP, bias=True).
# Qwen2-VL's, Qwen3-VL's and Qwen3.5's blocks are fc1/fc2 (VisionMlp, Qwen3VLVisionMLP).
GATED_VISION_TYPES = frozenset({"qwen2_5_vl"})


def vit_params(v: ConfigFields, text_hidden: int, gated: bool = False) -> int:
    """A vision transformer's weights: per layer the attention (4 h² and biases), the MLP
    (2 h i and biases; gated, 3 h i) and two LayerNorms (RMSNorms where gated); the patch
    embedding (channels × temporal patch × patch² × h), the position table and a final norm;
    the projector into the text model, through a spatial merge of m² patches where there is
    one (in = h m²: in² + in × out) or straight (h × out); and Qwen3-VL's deepstack mergers,
    one per deepstack_visual_indexes entry, each a LayerNorm over in and the projector again.
    Gemma-3's SigLIP: 423 M (the So400m tower, 428 M); Qwen3.5's: 447 M; Qwen2.5-VL-7B's,
    gated: 677 M (8.29 B with its 7.62 B text model, the card's total)."""
    h = v.int_("embed_dim", "hidden_size")  # Qwen2-VL: embed_dim is the tower's width
    ratio = v.c.get("mlp_ratio")
    inner = v.int_("intermediate_size", default=int(h * ratio) if isinstance(
        ratio, (int, float)) and not isinstance(ratio, bool) and 0 < ratio < 64 else None)
    layers = v.int_("num_hidden_layers", "depth")
    patch = v.int_("patch_size")
    channels = v.int_("in_channels", "in_chans", "num_channels", default=3)
    temporal = v.int_("temporal_patch_size", default=1)
    image = v.opt_int("image_size")
    positions = v.int_("num_position_embeddings",
                       default=patches_per_side(v) ** 2 if image else 0, minimum=0)
    merge = v.int_("spatial_merge_size", default=1)
    out = v.int_("out_hidden_size", default=text_hidden)
    norm = h if gated else 2 * h  # an RMSNorm's weight, or a LayerNorm's and its bias
    mlp = 3 * h * inner + 2 * inner + h if gated else 2 * h * inner + inner + h
    per_layer = 4 * h * h + 4 * h + mlp + 2 * norm
    patch_bias = 0 if gated else h  # Qwen2.5-VL's Conv3d patch embedding has no bias
    embed = channels * temporal * patch * patch * h + patch_bias + positions * h + norm
    width = h * merge * merge
    # straight: Gemma-3's RMSNorm (a weight, no bias) then h × out
    projector = (width * width + width + width * out + out) if merge > 1 else h * out + h
    return layers * per_layer + embed + projector + deepstack_mergers(v) * (
        2 * width + width * width + width + width * out + out)


def deepstack_mergers(v: ConfigFields) -> int:
    """Qwen3-VL's deepstack mergers: one per layer deepstack_visual_indexes names, each
    feeding that layer's features to the text model through a merger of its own (a LayerNorm
    over the h m² merged patches, then in² and in × out with biases: transformers'
    Qwen3VLVisionPatchMerger(use_postshuffle_norm=True)). Qwen3-VL-30B-A3B's [8, 16, 24]: 3;
    Qwen3.5's []: 0."""
    indexes = v.c.get("deepstack_visual_indexes")
    if indexes is None:
        return 0
    if not isinstance(indexes, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in indexes):
        raise InputError(f"{v.name}: deepstack_visual_indexes must be a list of layer "
                         f"numbers, got {indexes!r}")
    return len(indexes)


def is_llama4_tower(v: ConfigFields) -> bool:
    """Llama-4's tower: a pixel shuffle into a projector MLP (pixel_shuffle_ratio,
    projector_input_dim), as Llama4VisionConfig names them."""
    return v.c.get("model_type") == "llama4_vision_model" or (
        "pixel_shuffle_ratio" in v.c and "projector_input_dim" in v.c)


def pixel_shuffle_factor(v: ConfigFields) -> int:
    """Patches folded into one by Llama-4's pixel shuffle: 1 ÷ pixel_shuffle_ratio², 4 at
    0.5 (vLLM's ds_ratio, mllama4.py get_patch_per_chunk)."""
    ratio = v.c.get("pixel_shuffle_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise InputError(f"{v.name}: pixel_shuffle_ratio must be a number in (0, 1], got "
                         f"{ratio!r}")
    return round(1 / ratio**2)


def llama4_params(v: ConfigFields, text_hidden: int) -> int:
    """Llama-4's vision tower (transformers/vLLM Llama4VisionModel) and projector: per layer
    the ViT's (attention 4 h² and biases, MLP 2 h i and biases, two LayerNorms); the patch
    embedding as a linear without bias (channels × patch² × h), a class embedding, a position
    table of (image ÷ patch)² + 1 rows and two LayerNorms (pre, post); the pixel-shuffle
    adapter, fc1 i × projector_input_dim and fc2 projector_output_dim², without biases; and
    the projector, vision_output_dim × text hidden, without bias. Scout's and Maverick's:
    871,932,416 (the module-by-module count of find_string id 41112263523)."""
    h, inner = v.int_("hidden_size"), v.int_("intermediate_size")
    patch, side = v.int_("patch_size"), patches_per_side(v)
    per_layer = 4 * h * h + 4 * h + 2 * h * inner + inner + h + 4 * h
    embed = (v.int_("num_channels", default=3) * patch * patch * h
             + h  # the class embedding
             + (side * side + 1) * h  # positions, the class token's among them
             + 4 * h)  # layernorm_pre and layernorm_post, weight and bias
    proj_in, proj_out = v.int_("projector_input_dim"), v.int_("projector_output_dim")
    adapter = inner * proj_in + proj_out * proj_out  # vision_adapter.mlp fc1, fc2
    projector = v.int_("vision_output_dim") * text_hidden  # multi_modal_projector.linear_1
    return v.int_("num_hidden_layers") * per_layer + embed + adapter + projector
