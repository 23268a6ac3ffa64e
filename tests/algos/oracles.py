"""Plain-Python loop versions of agentgrpo.algos: the test oracles (STYLE rule 4).

Each mirrors a formula of DESIGN §3 one element at a time, with no vectorisation, so
that the shipped torch code is checked against an independent reading of the spec.
"""
from __future__ import annotations

import math


def runs(mask_row: list[int]) -> list[list[int]]:
    """Maximal runs of ones in a 0/1 row, as lists of positions."""
    out: list[list[int]] = []
    for t, m in enumerate(mask_row):
        if m:
            if t > 0 and mask_row[t - 1]:
                out[-1].append(t)
            else:
                out.append([t])
    return out


def group_advantages(scores: list[float], groups: list, norm_by_std: bool = True,
                     eps: float = 1e-6) -> list[float]:
    members: dict = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    adv = [0.0] * len(scores)
    for idx in members.values():
        vals = [scores[i] for i in idx]
        if len(vals) < 2 or max(vals) == min(vals):
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        for i in idx:
            adv[i] = (scores[i] - mean) / (std + eps) if norm_by_std else scores[i] - mean
    return adv


def turn_discount(mask_row: list[int], alpha: float, unit: str = "token") -> list[float]:
    active = [t for t, m in enumerate(mask_row) if m]
    if not active:
        return [0.0] * len(mask_row)
    if unit == "token":
        raw = {t: alpha ** (len(active) - 1 - k) for k, t in enumerate(active)}
    else:
        turns = runs(mask_row)
        raw = {t: alpha ** (len(turns) - 1 - j) for j, run in enumerate(turns) for t in run}
    mean = sum(raw.values()) / len(active)
    return [raw[t] / mean if t in raw else 0.0 for t in range(len(mask_row))]


def token_advantages(adv: list[float], mask: list[list[int]], length_norm: str,
                     alpha: float | None = None, unit: str = "token",
                     credit: list[list[float]] | None = None, credit_present=None,
                     groups: list | None = None, coef: float = 0.0) -> list[list[float]]:
    out = []
    centred = None
    if credit is not None:
        centred = centred_credit(credit, mask, groups, credit_present)
    for b, row in enumerate(mask):
        length = sum(row)
        norm = {"linear": 1 / max(length, 1), "sqrt": 1 / math.sqrt(max(length, 1)),
                "none": 1.0}[length_norm]
        w = turn_discount(row, alpha, unit) if alpha is not None else [1.0] * len(row)
        turn_of = {t: j for j, run in enumerate(runs(row)) for t in run}
        values = []
        for t, m in enumerate(row):
            a = adv[b]
            if centred is not None and t in turn_of and turn_of[t] < len(centred[b]):
                a += coef * centred[b][turn_of[t]]
            values.append(a * norm * w[t] * m)
        out.append(values)
    return out


def centred_credit(credit, mask, groups, present=None):
    """c[b][j] = p[b][j] − mean of p[b'][j] over group members b' that have turn j."""
    has = [[j < len(runs(mask[b])) and (present is None or bool(present[b][j]))
            for j in range(len(credit[b]))] for b in range(len(credit))]
    out = []
    for b in range(len(credit)):
        row = []
        for j in range(len(credit[b])):
            if not has[b][j]:
                row.append(0.0)
                continue
            peers = [credit[o][j] for o in range(len(credit))
                     if groups[o] == groups[b] and has[o][j]]
            row.append(credit[b][j] - sum(peers) / len(peers))
        out.append(row)
    return out


def agg(loss: list[list[float]], mask: list[list[float]], mode: str, num_tokens=None,
        num_seqs=None, horizon=None) -> float:
    batch, width = len(loss), len(loss[0])
    seqs = batch if num_seqs is None else num_seqs
    total = sum(loss[b][t] * mask[b][t] for b in range(batch) for t in range(width))
    if mode == "token-mean":
        tokens = sum(sum(r) for r in mask) if num_tokens is None else num_tokens
        return total / tokens if tokens else 0.0
    if mode == "token-sum":
        return total
    if mode == "seq-mean-token-sum":
        return total / seqs
    if mode == "seq-mean-token-mean":
        per_seq = [sum(loss[b][t] * mask[b][t] for t in range(width)) / sum(mask[b])
                   if sum(mask[b]) else 0.0 for b in range(batch)]
        return sum(per_seq) / seqs
    if mode == "seq-mean-token-sum-norm":
        return total / (seqs * (width if horizon is None else horizon))
    raise ValueError(mode)


def ppo_token_loss(logp: float, old: float, adv: float, clip_low: float, clip_high: float,
                   ratio: float | None = None) -> tuple[float, bool]:
    """−min(ρA, clip(ρ)A) for one token, and whether the clipped term was taken."""
    r = math.exp(logp - old) if ratio is None else ratio
    clipped_r = min(max(r, 1 - clip_low), 1 + clip_high)
    plain, clipped = -adv * r, -adv * clipped_r
    return max(plain, clipped), clipped > plain


def llds(logp, old, adv, mask, gate="action"):
    """Loss, and the set of (b, t) that receive gradient, by the DESIGN §3.7 formula."""
    numerator, n_tokens, touched = 0.0, 0, set()
    for b, row in enumerate(mask):
        if adv[b] < 0:
            continue
        n_tokens += sum(row)
        delta = [old[b][t] - logp[b][t] for t in range(len(row))]
        whole = sum(delta[t] for t in range(len(row)) if row[t]) > 0
        for run in runs(row):
            gate_on = {"action": sum(delta[t] for t in run) > 0, "token": True,
                       "response": whole}[gate]
            if not gate_on:
                continue
            for t in run:
                if delta[t] > 0:
                    numerator += delta[t]
                    touched.add((b, t))
    return (numerator / n_tokens if n_tokens else 0.0), touched


def assert_close(actual, expected, rel: float = 1e-6, abs: float = 1e-7) -> None:
    """Compare a tensor with (nested) Python numbers, elementwise |a − e| ≤ abs + rel·|e|."""
    import torch

    want = torch.tensor(expected, dtype=torch.float64)
    got = actual.detach().to(torch.float64)
    assert got.shape == want.shape, (tuple(got.shape), tuple(want.shape))
    torch.testing.assert_close(got, want, rtol=rel, atol=abs)
