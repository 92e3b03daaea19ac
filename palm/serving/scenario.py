"""From the cost of one step to what a user of a served model sees: time to first token, time
per output token, tokens per second, under static or continuous batching, offline or at a
request rate.

**Pipeline.** With ``pp`` stages a replica's sequences are split into ``m = min(pp, n)``
micro-batches that flow through the stages one behind the other (vLLM and TensorRT-LLM
pipeline parallelism); a token of a sequence takes every stage in turn, so

    tpot = sum_s t_s(n / m) + (pp - 1) x hand-off,

and the replica emits ``n`` tokens per ``tpot``.

**Static batching** (one prefill, then ``output_tokens - 1`` decode steps; the prefill emits
the first token): ``ttft`` is the prefill of all ``n`` prompts (in ``ceil(n I / c)`` steps of
``c = chunk_tokens`` tokens when set), ``tpot`` the decode step at the mean cache length
``I + O/2`` (decode cost is linear in the cache length, so the mean step is the step at the
mean length), and the batch takes ``ttft + (O - 1) tpot``.

**Continuous batching in steady state** (every finished sequence replaced at once): each step
emits a token for each of the ``n`` sequences and, on average, prefills ``n / O`` new prompts
(``n I / O`` tokens) in the same products; a sequence is at a uniformly random point of its
answer, so the caches hold ``I + (O + 1)/2`` tokens on average (time-averaged KV length). A
step cap ``c`` keeps at most ``c / (1 + I/O)`` sequences in flight and runs prompts in chunks
of ``c - n`` tokens. A new request waits half a step for the current one to end, then its
prompt runs in ``ceil(I / chunk)`` steps: ``ttft = tpot / 2 + ceil(I / chunk) x t'``, ``t'``
the step carrying its prompt.

**Server scenario** (requests at rate ``lambda`` per replica): by Little's law the sequences
in flight are ``n = lambda (ttft(n) + O tpot(n))``; the smallest ``n`` satisfying it is the
steady state (found by bisection), and ``lambda`` above what ``batch`` sequences sustain
saturates the server (queues grow without bound; ``ttft_s`` is then reported as ``null``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from palm.hardware.spec import GpuClusterHardware, Hardware
from palm.serving.chips import chip_link
from palm.serving.comm import group_link, handoff_time
from palm.serving.kernels import ServeRates
from palm.serving.model import ServedModel
from palm.serving.spec import ServingConfig
from palm.serving.step import RuntimeCosts, StepCost, StepLoad, stage_step

__all__ = ["Pipeline", "Outcome", "serve", "step_sequences", "continuous_capacity"]


@dataclass(frozen=True)
class Pipeline:
    """Everything needed to price a step on every stage of one replica."""

    model: ServedModel
    sr: ServeRates
    hw: Hardware
    runtime: RuntimeCosts

    @property
    def pp(self) -> int:
        return len(self.model.stages)

    def token_time(self, load: StepLoad, sequences: int) -> tuple[float, list[StepCost]]:
        """Time for one token of every sequence of ``load`` to cross the pipeline, and each
        stage's step cost for one micro-batch (module docstring)."""
        device, costs = self.device_time(load, sequences)
        return max(device, self.host_time(load)), costs

    def device_time(self, load: StepLoad, sequences: int) -> tuple[float, list[StepCost]]:
        """The devices' share of :meth:`token_time`: the stages' steps and hand-offs."""
        m = max(1, min(self.pp, sequences))
        micro = load.split(m)
        costs = [
            stage_step(s, micro, sr=self.sr, model=self.model, hw=self.hw, runtime=self.runtime)
            for s in range(self.pp)
        ]
        hand = 0.0
        if self.pp > 1:
            hw = self.hw
            if isinstance(hw, GpuClusterHardware):
                link = group_link(hw, size=self.model.tp * 2)
            else:
                link = chip_link(hw)
            nbytes = micro.tokens * self.model.embedding.hidden * self.sr.act_bytes
            hand = (self.pp - 1) * handoff_time(nbytes=nbytes, link=link)
        return sum(c.time_s for c in costs) + hand, costs

    def host_time(self, load: StepLoad) -> float:
        """The runtime's host work for one step of ``load`` (scheduling, sampling, the
        step's bookkeeping: ``step_s`` plus ``sequence_s`` per sequence in the step), which
        runs while the devices run the previous step (TensorRT-LLM's overlap scheduler, vLLM's
        asynchronous scheduling), so that a step takes the longer of the two."""
        return self.runtime.step_s + self.runtime.sequence_s * step_sequences(load)


def step_sequences(load: StepLoad) -> int:
    """Sequences a step carries: the decoding ones and the prompts it runs."""
    return load.decode + math.ceil(load.prompts)


@dataclass(frozen=True)
class Outcome:
    """What one replica does in steady state."""

    ttft_s: float | None
    tpot_s: float
    sequences: int
    tokens_per_s: float
    requests_per_s: float
    prefill_s: float
    decode: list[StepCost]
    prefill: list[StepCost]
    saturated: bool = False
    #: the steps behind the figures, for the calibration: the decode step's and the prefill
    #: step's loads and how many prefill steps run (static batching: ``ttft`` is that many)
    decode_load: StepLoad = StepLoad()
    prefill_load: StepLoad = StepLoad()
    prefill_steps: int = 1


def serve(pipe: Pipeline, serving: ServingConfig, *, sequences: int, rate_per_s: float) -> Outcome:
    """The steady state of one replica holding at most ``sequences`` sequences (module
    docstring); ``rate_per_s`` is the replica's request rate (server scenario)."""
    if serving.batching == "static":
        return _static(pipe, serving, sequences)
    if serving.scenario == "server":
        return _server(pipe, serving, sequences, rate_per_s)
    return _continuous(pipe, serving, sequences)


def _static(pipe: Pipeline, serving: ServingConfig, n: int) -> Outcome:
    i, o, c = serving.input_tokens, serving.output_tokens, serving.chunk_tokens
    steps = math.ceil(n * i / c) if c > 0 else 1
    whole = StepLoad(prefill_tokens=n * i, prompts=n, prompt_len=i, chunk=c, finishing=n)
    part = whole.split(steps)
    one, pre_costs = pipe.token_time(part, n)
    prefill = steps * one
    dec = StepLoad(decode=n, context=i + o / 2.0)
    tpot, dec_costs = pipe.token_time(dec, n)
    total = prefill + (o - 1) * tpot
    return Outcome(
        ttft_s=prefill,
        tpot_s=tpot,
        sequences=n,
        tokens_per_s=n * o / total,
        requests_per_s=n / total,
        prefill_s=prefill,
        decode=dec_costs,
        prefill=pre_costs,
        decode_load=dec,
        prefill_load=part,
        prefill_steps=steps,
    )


def _steady_load(serving: ServingConfig, n: int) -> tuple[StepLoad, int]:
    """The average step of ``n`` sequences in continuous batching, and its prompt chunk."""
    i, o, c = serving.input_tokens, serving.output_tokens, serving.chunk_tokens
    chunk = max(c - n, 1) if c > 0 else 0
    load = StepLoad(
        decode=n,
        context=i + (o + 1) / 2.0,
        prefill_tokens=math.ceil(n * i / o),
        prompts=n / o,
        prompt_len=i,
        chunk=chunk,
        finishing=n / o,
    )
    return load, chunk


def continuous_capacity(serving: ServingConfig, sequences: int) -> int:
    """Sequences a continuous batch keeps under the step cap (module docstring)."""
    c = serving.chunk_tokens
    if c <= 0:
        return sequences
    per = 1.0 + serving.input_tokens / serving.output_tokens
    return max(1, min(sequences, int(c / per)))


def _at(pipe: Pipeline, serving: ServingConfig, n: int) -> tuple[float, float, Outcome]:
    """tpot, ttft and the outcome of ``n`` sequences in continuous steady state."""
    i, o = serving.input_tokens, serving.output_tokens
    load, chunk = _steady_load(serving, n)
    tpot, costs = pipe.token_time(load, n)
    others = StepLoad(decode=max(n - 1, 0), context=load.context)
    steps = math.ceil(i / chunk) if chunk else 1
    first = StepLoad(
        decode=others.decode,
        context=others.context,
        prefill_tokens=math.ceil(i / steps),
        prompts=1.0 / steps,
        prompt_len=i,
        chunk=chunk,
        finishing=1.0 / steps,
    )
    t_first, pre_costs = pipe.token_time(first, max(n, 1))
    ttft = 0.5 * tpot + steps * t_first
    out = Outcome(
        ttft_s=ttft,
        tpot_s=tpot,
        sequences=n,
        tokens_per_s=n / tpot,
        requests_per_s=n / tpot / o,
        prefill_s=steps * t_first,
        decode=costs,
        prefill=pre_costs,
        decode_load=load,
        prefill_load=first,
        prefill_steps=steps,
    )
    return tpot, ttft, out


def _continuous(pipe: Pipeline, serving: ServingConfig, sequences: int) -> Outcome:
    n = continuous_capacity(serving, sequences)
    return _at(pipe, serving, n)[2]


def _server(pipe: Pipeline, serving: ServingConfig, sequences: int, rate: float) -> Outcome:
    """The least ``n`` with ``rate x (ttft + O tpot) <= n`` (module docstring)."""
    o = serving.output_tokens
    cap = continuous_capacity(serving, sequences)

    def need(n: int) -> float:
        tpot, ttft, _ = _at(pipe, serving, n)
        return rate * (ttft + o * tpot)

    if need(cap) > cap:  # saturated: queues grow without bound
        return dataclasses.replace(_at(pipe, serving, cap)[2], ttft_s=None, saturated=True)
    lo, hi = 0, cap  # need(hi) <= hi; find the least such n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) <= mid:
            hi = mid
        else:
            lo = mid
    out = _at(pipe, serving, hi)[2]
    return dataclasses.replace(out, tokens_per_s=rate * o, requests_per_s=rate)
