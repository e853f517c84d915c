"""Whether a replica's price was read for a host that holds it: a tensor-parallel replica
priced at a one-GPU offer's rate is cautioned.

A card's price per GPU-hour is
one offer's (``Accelerator.price_offer_gpus``: AWS g6e.xlarge, one L40S a VM); a replica of
TP2 needs its two GPUs in one host, since its all-reduces run over that host's PCIe or NVLink,
and plan prices it as two of those GPUs at the one-GPU rate, a pair no single-GPU VM rents:
AWS's smallest L40S host of two or more is g6e.12xlarge, four of them ("1 replica of 2 x
l40s (TP2) ... $3.72/h" was two g6e.xlarge's price)."""

from __future__ import annotations

from ridgeline.candidate import Candidate
from ridgeline.hardware import price_source, resolve_accelerator


def shared_host_caution(c: Candidate, priced_by_user: bool = False) -> str:
    """What to say where ``c``'s replica holds more tensor-parallel GPUs than the offer its
    card's catalog price was read from (``price_offer_gpus``), or "": a price the user gave
    (``--price``) is theirs to fit, and a card whose offer is not recorded says nothing."""
    acc = resolve_accelerator(c.accelerator)
    offer = acc.price_offer_gpus
    if priced_by_user or offer is None or c.tp <= offer or c.price_per_gpu_hour is None:
        return ""
    where = price_source(acc).partition(" (")[0] or "its catalog price"
    return (f"{c.accelerator}'s ${c.price_per_gpu_hour:g} a GPU-hour is a {offer}-GPU "
            f"offer's ({where}); a tensor-parallel replica needs its GPUs in one host, which "
            "that offer does not rent, so its price assumes them rented together at that "
            f"rate, and a host that holds them may cost more a GPU (--price "
            f"{c.accelerator}=USD prices the one you rent)")
