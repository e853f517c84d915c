"""A request's life in the engine: waiting, running (prefill chunks, then decode), finished."""

from __future__ import annotations

from dataclasses import dataclass, field

WAITING = "waiting"
RUNNING = "running"
FINISHED = "finished"
REJECTED = "rejected"


@dataclass(eq=False)
class Request:
    """Mutable simulation state of one request (nano-vllm's Sequence, reduced to counts).

    Known tokens are the prompt plus what was generated. Each step computes some of the
    known tokens not yet in the cache (a prefill chunk, or the one last token in decode);
    when the cache holds them all, the model samples one more token.
    """

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_group: int = -1  # requests of one group share their first prefix_tokens tokens
    prefix_tokens: int = 0
    status: str = WAITING
    num_computed: int = 0  # tokens whose KV is in the cache
    num_generated: int = 0
    private_blocks: int = 0  # blocks this request alone holds …
    window_held: int = 0  # … of them, a hybrid's window groups' (sim/blocks.py)
    shared: list[tuple[int, int]] = field(default_factory=list)  # prefix-cache keys it holds
    first_scheduled_s: float = -1.0  # the start of the first step that ran it …
    # … and, as vLLM's request stats time it, when the engine took it into its waiting queue
    # (EngineCoreEventType.QUEUED) and when the batch that first scheduled it was formed
    # (SCHEDULED): ``Simulator.formed_s``
    queued_s: float = -1.0
    scheduled_s: float = -1.0
    first_token_s: float = -1.0
    finish_s: float = -1.0
    last_token_s: float = -1.0  # when its latest token came out (a step's end)
    preemptions: int = 0
    reason: str = ""
    decode_base: int = 0  # while in a DecodeSet: cached tokens − the global step
    decode_gen: int = 0  # … and generated tokens − the global step
    decode_join: int = 0  # … and the number it joined under
    decode_from: int = 0  # … and the global step it joined at
    decode_clipped: bool = False  # … and whether its remaining output is past the clip
    decode_window: bool = False  # … and whether its blocks stop at the window's cap
    # a capped open loop's request held for a seat: when it came (its offered arrival, the
    # rate's draw or the trace's time), arrival_s then being its send; -1: sent as it came
    came_s: float = -1.0
    # its latencies count: it arrived in the recorder's window (``Recorder.arrive``), so its
    # streamed chunks join the ITL as its TTFT and TPOT join theirs
    counted: bool = True

    @property
    def offered_arrival_s(self) -> float:
        """When the request came to the client: its arrival, or before a capped loop held
        it for a seat (``came_s``), arrival_s being the send, where its clock starts."""
        return self.came_s if self.came_s >= 0 else self.arrival_s

    @property
    def queue_time_s(self) -> float:
        """Its queueing delay as vLLM reports it (vllm:request_queue_time_seconds, v1/metrics/
        stats.py: the first SCHEDULED event's time less the QUEUED one's): from when the
        engine took it in to when the batch that first scheduled it was formed; where it
        never passed through the engine's arrival (a request built by hand), first scheduled
        − arrival."""
        if self.queued_s < 0 or self.scheduled_s < 0:
            return self.first_scheduled_s - self.arrival_s
        return self.scheduled_s - self.queued_s

    @property
    def known_tokens(self) -> int:
        return self.prompt_tokens + self.num_generated

    @property
    def to_compute(self) -> int:
        """Tokens to run through the model before the next token can be sampled."""
        return self.known_tokens - self.num_computed

    @property
    def blocks_held(self) -> int:
        return self.private_blocks + len(self.shared)

    @property
    def max_cached_tokens(self) -> int:
        """Cache the request needs at its end: prompt + output − 1 (the last is never fed)."""
        return self.prompt_tokens + self.output_tokens - 1
