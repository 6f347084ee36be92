"""`lamina.train` and `lamina.Trainer`: train a forward function that returns a scalar loss.

    trainer = lamina.Trainer(module, data={"x": xs, "y": ys}, optimizer="adamw", lr=1e-3)
    for record in trainer.run(steps=50):      # one StepRecord per step: step, loss, lr, seconds
        ...
    trainer.parameters                         # the trained parameters by argument name

What it does, once: derive the backward pass and the optimizer step from the forward function
(`derive-backward{data=...}`, `append-optimizer{... lr-input=true}`), apply the user's pipeline
(`pipeline=`, e.g. fusion), and compile the step once with `lamina.compile(..., donate=True)`:
the parameters and optimizer state are donated, so on the NumPy and compiled backends each step
updates them in place. Then, per step: the batch (`data[name][i % N]`, N the leading dim of the
data arrays), the learning rate of the schedule (fed through the step's `learning_rate`
argument, so a schedule never recompiles), one call, and each updated result fed back into the
argument its `lamina.updates` entry names (never by name). The loss is the one result that
replaces no argument.

Which arguments are what: the `data` keys are the data arguments; every other float argument is
a parameter (derive-backward's default `wrt`), except a `frozen` one; the moments, momentum
buffers, step count and learning rate are found by their roles (`lamina.role`,
`lamina.ir.buffers.updates.ROLES`). A `frozen` argument (the torch importer's buffers and lifted
constants: a rotary table's inv_freq, BERT's position_ids) is neither data nor trained: no
gradient, no weight decay, no optimizer state, the same value every step.

The data arrays are read where they are (no copy, unless their dtype needs converting), so
changing one during training changes the batches. Initial parameters: `init` (by argument
name, every parameter; the arrays are copied, since the step updates them in place), else
`initializer(seed)`: a parameter of rank >= 2 uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] with
fan_in the product of all dims but the last (Lamina's matmul weights are [in, out]: torch's
nn.Linear bound), rank 0 and 1 (biases, norm gains) zero; drawn in argument order from
`np.random.default_rng(seed)`. Moments and buffers start at zero, the step count at 0.
A frozen argument's value comes from `init` alone (the importer's weights hold it), which then
names it beside the parameters; without `init` the trainer refuses to step, naming it, since a
drawn rotary table or position index is meaningless (a resumed run reads it from its checkpoint).

Schedules (`lr_at`, step i counted from 0): `constant` is `lr`; with `warmup=W` the first W steps
ramp linearly, lr (i + 1) / W; `cosine` then decays from lr to 0 over the remaining steps,
lr (1 + cos(pi (i - W) / (steps - W))) / 2. The cosine spans the run's `steps`: a run resumed
with another `steps` than the checkpoint's follows the new span from there on (lamina-train
says so in a note).

Language models (`tokens=`, with `seq` and `batch`): a 1-D integer token stream (uint16 or
int32, typically `np.load(path, mmap_mode="r")`, read where it is) instead of `data`. Step i (from
0) takes `batch` windows of `seq + 1` tokens starting at offsets drawn uniformly from
[0, len - seq) by `np.random.default_rng([seed, 0, i])`, nanoGPT's `get_batch`: the input
argument (`input_arg`, default the first integer argument) gets tokens [s, s + seq) and the
target argument (`target_arg`, default the second) tokens [s + 1, s + seq + 1). A step's
windows depend on the seed and the step alone, so a resumed run draws what the uninterrupted one
would. `seq` and `batch` default to the input argument's shape [batch, seq] and must match it.
The vocabulary is the rows of the table the input argument indexes (`lamina.gather`, as
`backends.inputs.index_rows` finds it); every token of the stream is checked against it once,
before training, in chunks (a token outside it would make the gather read zeros, silently).

Evaluation (`eval_every=K` with `eval_data=` batches like `data`, or `eval_tokens=`, a stream
of which `eval_batches` fixed windows are drawn once from `default_rng([seed, 1])`): after every
K-th step the forward function, compiled once beside the step, runs on every eval batch with the
current parameters; the mean of its losses is the record's `eval_loss`. The same batches every
time, so the curve compares like with like. `tokens_per_second` is batch * seq over the step's
time with tokens, or the elements of a data argument that some gather reads as indices.

Data parallel (`mesh="data=8"`, `lamina-train --mesh data=8`): `place-batch` splits the data
arguments' batch (dim 0) over that mesh axis and replicates the parameters, on the forward,
before derive-backward; a forward that is already placed is trained on its own placement (and
`mesh` is refused for it). Whenever the derived step is placed, `propagate-sharding,
insert-collectives` (with the backend's `target` when given, else the passes' default) place
the backward and the update and reduce each gradient once per step (one bucketed all_reduce
for replicated parameters), before the user's `pipeline`. The NumPy backends then run every
device of the mesh (the SPMD interpreter), the JAX backend one shard_map over `devices`
devices; data, parameters, state and checkpoints stay global arrays (cut into blocks by the
backend), so the loss curve is the single-device one within rounding.

Gradient accumulation (`accumulate=K`, `lamina-train --accumulate K`): `accumulate-gradients`
runs between derive-backward and append-optimizer, so each step's batch is K micro-batches
(forward and backward one after the other, gradients summed in f32, one update, one gradient
reduction when data parallel); the loss must be a mean over the batch, and the batch must
divide by K (per device with a mesh). The curve is the full batch's up to summation order.

Mixed precision and ZeRO (`mixed_precision="bf16"|"f16"`, `zero=1|2|3`; `lamina-train
--mixed-precision`, `--zero`): mixed-precision (f16 with dynamic loss scaling, whose scale and
counter are state like the moments) and then shard-optimizer over the mesh axis run right after
append-optimizer, before the step is placed, the order those passes require; ZeRO needs a placed
step (`mesh`, or a placed forward).

Checkpoints (`save_checkpoint`, `Trainer.resume`): every updated argument by name (and every
frozen one, unchanged, so a resume needs no `init`), plus the step,
the data position (step mod N; with a token stream, the windows drawn so far, which is the
step), what the data is (N, or the stream's length, batch, seq and arguments: a resume on other
data is refused), the seed and the options (`lamina.checkpoint`), so a run resumed from step k
continues exactly as the uninterrupted run would: same state bits, same batch, same learning
rate (on the NumPy and compiled backends, whose results do not depend on threads, the resumed
run is bit-identical). The checkpoint's seed replaces the resuming trainer's, since the windows
follow it. A non-finite loss raises `NonFiniteLoss` naming the
step; the state then holds that step's results, and a checkpoint on disk is left as it was.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from lamina.ir.core.diagnostics import LaminaError

if TYPE_CHECKING:
    from lamina.executable import Executable
    from lamina.ir.mesh.target import Target
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.dialects.func import FuncOp

OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("constant", "cosine")
# a loss curve whose positive values span more than this factor is drawn on a log y axis
LOG_SCALE_SPAN = 20.0
LOW_TYPES = ("bf16", "f16")   # mixed-precision's compute types (`lamina.passes.mixed_precision`)
STATE_ROLES = ("parameter", "first_moment", "second_moment", "momentum_buffer", "step_count",
               "loss_scale", "good_steps")
FROZEN = "frozen"   # `lamina.ir.buffers.updates.FROZEN`: read, never trained (imported lazily)


class NonFiniteLoss(LaminaError):
    """The loss of a step (`which="loss"`), or its eval loss (`which="eval loss"`), was NaN or
    infinite: training stops there, since every later step would compute from it (a NaN
    parameter) or the model being kept is no longer measured (a NaN eval loss)."""

    def __init__(self, step: int, loss: float, which: str = "loss"):
        super().__init__(f"step {step}: the {which} is {loss}; training stopped (a checkpoint "
                         "written before this step is kept)")
        self.step, self.loss, self.which = step, loss, which


@dataclass(frozen=True)
class Hyper:
    """The optimizer and schedule options (what a checkpoint records)."""

    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    momentum: float = 0.0
    lr_schedule: str = "constant"
    warmup: int = 0
    grad_clip: float = 0.0
    accumulate: int = 1   # micro-batches per step (accumulate-gradients; 1: the whole batch)
    mixed_precision: str = ""   # bf16 / f16: the mixed-precision pass's compute type ("": off)
    zero: int = 0   # the shard-optimizer (ZeRO) stage, 1-3 (0: off)

    def check(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise LaminaError(f"optimizer must be {' or '.join(OPTIMIZERS)}, got "
                              f"'{self.optimizer}'")
        if self.lr_schedule not in SCHEDULES:
            raise LaminaError(f"lr_schedule must be {' or '.join(SCHEDULES)}, got "
                              f"'{self.lr_schedule}'")
        if self.warmup < 0:
            raise LaminaError(f"warmup must be >= 0, got {self.warmup}")
        if self.momentum and self.optimizer != "sgd":
            raise LaminaError(f"momentum applies to the sgd optimizer, got momentum="
                              f"{self.momentum} with {self.optimizer}")
        if isinstance(self.accumulate, bool) or not isinstance(self.accumulate, int) or \
                self.accumulate < 1:
            raise LaminaError(f"accumulate must be an integer >= 1, got {self.accumulate!r}")
        if self.mixed_precision not in ("", *LOW_TYPES):
            raise LaminaError(f"mixed_precision must be {' or '.join(LOW_TYPES)}, got "
                              f"{self.mixed_precision!r}")
        if self.zero not in (0, 1, 2, 3) or isinstance(self.zero, bool):
            raise LaminaError(f"zero must be a ZeRO stage 1, 2 or 3 (0: off), got {self.zero!r}")
        for name in ("lr", "weight_decay", "beta1", "beta2", "eps", "momentum", "grad_clip"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise LaminaError(f"{name} must be a finite number >= 0, got {value}")

    def pipeline(self, entry: str, data: list[str], axis: str = "data") -> str:
        """derive-backward and append-optimizer for `entry`, the learning rate an input; with
        `accumulate` K > 1, accumulate-gradients between them (K micro-batches, one update);
        then mixed-precision (f16 with dynamic loss scaling, which its range needs) and
        shard-optimizer over mesh axis `axis`, in that order, before the step is placed."""
        opt = [f"func={entry}_grad", f"kind={self.optimizer}", "lr-input=true",
               f"weight-decay={self.weight_decay!r}"]
        if self.optimizer == "adamw":
            opt += [f"beta1={self.beta1!r}", f"beta2={self.beta2!r}", f"eps={self.eps!r}"]
        elif self.momentum:
            opt.append(f"momentum={self.momentum!r}")
        if self.grad_clip:
            opt.append(f"grad-clip={self.grad_clip!r}")
        accumulate = f"accumulate-gradients{{func={entry}_grad micro-batches={self.accumulate} " \
            f"data={','.join(data)}}}," if self.accumulate > 1 else ""
        after = ""
        if self.mixed_precision:
            scale = " loss-scale=dynamic" if self.mixed_precision == "f16" else ""
            after += f",mixed-precision{{func={entry}_step compute={self.mixed_precision}{scale}}}"
        if self.zero:
            after += f",shard-optimizer{{func={entry}_step stage={self.zero} axis={axis}}}"
        return f"derive-backward{{func={entry} data={','.join(data)}}},{accumulate}" \
               f"append-optimizer{{{' '.join(opt)}}}{after}"


def parse_mesh(text: str, where: str = "mesh") -> tuple[str, int]:
    """(axis, size) of a data-parallel mesh written `AXIS=SIZE` (`data=8`), or one error."""
    axis, eq, size = text.partition("=")
    axis, size = axis.strip(), size.strip()
    ok = bool(eq) and bool(axis) and (axis[0].isalpha() or axis[0] == "_") and \
        all(c.isalnum() or c == "_" for c in axis) and size.isdigit()
    if not ok:
        raise LaminaError(f"{where} '{text}': expected AXIS=SIZE, a mesh axis name and its "
                          "number of devices (e.g. data=8)")
    if int(size) < 1:
        raise LaminaError(f"{where} '{text}': the axis size must be at least 1, got {size}")
    return axis, int(size)


def placement_pipeline(target: Any = None) -> str:
    """propagate-sharding and insert-collectives for a placed step, with the run's target (a
    name or a .toml path, or a loaded `Target`), else the passes' default target."""
    if target is None:
        return "propagate-sharding,insert-collectives"
    spec = target if isinstance(target, str) else \
        (target.source if not target.source.startswith("<builtin") else target.name)
    quoted = '"' + spec.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"propagate-sharding{{target={quoted}}},insert-collectives{{target={quoted}}}"


def lr_at(hyper: Hyper, step: int, steps: int) -> float:
    """The learning rate of step `step` (from 0) of a run of `steps` (module docstring)."""
    if step < hyper.warmup:
        return hyper.lr * (step + 1) / hyper.warmup
    if hyper.lr_schedule == "cosine":
        span = max(1, steps - hyper.warmup)
        return hyper.lr * 0.5 * (1.0 + math.cos(math.pi * min(step - hyper.warmup, span) / span))
    return hyper.lr


@dataclass(frozen=True)
class StepRecord:
    """One step of training: its number (1 for the first update), loss, rate and time; tokens
    per second where the data says how many tokens a step reads, the eval loss on the steps that
    evaluate; with a target, the most bytes per device the step held in each of the target's
    tiers (`peak_bytes`, the backend's checked-execution accounting: `lamina-run --target`'s
    `peak_bytes` statistic)."""

    step: int
    loss: float
    lr: float
    step_seconds: float
    tokens_per_second: float | None = None
    eval_loss: float | None = None
    peak_bytes: dict[str, int] | None = None   # per tier of the target, with a target

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of a `--log` line: the fields that are known (None ones left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> StepRecord | None:
        """The record of an `as_dict` object (a log line read back), or None if it is not one."""
        try:
            return cls(**{k: record[k] for k in cls.__dataclass_fields__ if k in record})
        except TypeError:
            return None


def initializer(func: FuncOp, params: list[int], seed: int) -> dict[int, np.ndarray]:
    """The documented initial value of each parameter (module docstring), by argument index."""
    from lamina.ir.core.dtypes import to_storage
    from lamina.ir.ops.opbase import tensor_info

    rng = np.random.default_rng(seed)
    out: dict[int, np.ndarray] = {}
    for i in params:
        info = tensor_info(func.function_type.inputs.data[i])
        if len(info.shape) >= 2:
            bound = 1.0 / math.sqrt(max(1, math.prod(info.shape[:-1])))
            a = rng.uniform(-bound, bound, size=info.shape)
        else:
            a = np.zeros(info.shape)
        out[i] = np.array(to_storage(a, info.dtype), order="C", copy=True)  # 0-d stays 0-d
    return out


def _fit(where: str, name: str, t: Any, a: Any, batched: bool) -> np.ndarray:
    """`a` converted to argument `name`'s storage type `t` (with a leading batch dim when
    `batched`), C-contiguous (and a copy unless `batched`); a shape, dtype or value it cannot
    take is one error."""
    from lamina.ir.core.dtypes import STORAGE, to_storage, unrepresentable
    from lamina.ir.ops.opbase import tensor_info

    info = tensor_info(t)
    a = np.asarray(a)
    shape = tuple(a.shape[1:]) if batched else tuple(a.shape)
    if shape != info.shape or batched and (a.ndim == 0 or a.shape[0] == 0):
        if batched:
            want = ", ".join(["N", *map(str, info.shape)])
            raise LaminaError(f"{where}: '{name}' has shape {tuple(a.shape)}; argument '{name}' "
                              f"is {t}, so its batches need shape ({want}) with N >= 1 (the "
                              "leading dim indexes batches)")
        raise LaminaError(f"{where}: '{name}' has shape {tuple(a.shape)}, argument '{name}' is {t}")
    want_dtype = STORAGE[info.dtype]
    if a.dtype != want_dtype and not np.can_cast(a.dtype, want_dtype, casting="same_kind"):
        raise LaminaError(f"{where}: '{name}' has dtype {a.dtype}, argument '{name}' is {t}")
    if a.dtype != want_dtype and (why := unrepresentable(a, info.dtype)) is not None:
        raise LaminaError(f"{where}: '{name}' does not fit its argument type {t}: {why}")
    converted = to_storage(a, info.dtype)
    # a batch is only read, so the data need no copy; a parameter is donated (updated in place by
    # every step), so it is copied and the caller's array stays as it was
    return np.ascontiguousarray(converted) if batched else \
        np.array(converted, order="C", copy=True)


def _check_data(forward: FuncOp, data: Mapping[str, np.ndarray], where: str
                ) -> tuple[dict[str, np.ndarray], int]:
    """The data arrays converted to their arguments' storage types, and N (batches)."""
    from lamina.backends.interface import arg_names

    names = arg_names(forward)
    extra = sorted(k for k in data if k not in names)
    if extra:
        raise LaminaError(f"{where}: arrays {', '.join(extra)} match no argument of "
                          f"@{forward.sym_name.data} (arguments: {', '.join(names)})")
    out = {name: _fit(where, name, t, data[name], batched=True)
           for name, t in zip(names, forward.function_type.inputs.data, strict=True)
           if name in data}
    batches = {n: a.shape[0] for n, a in out.items()}
    if len(set(batches.values())) > 1:
        listed = ", ".join(f"'{n}' {b}" for n, b in batches.items())
        raise LaminaError(f"{where}: the data arrays disagree on the number of batches (leading "
                          f"dim): {listed}")
    return out, next(iter(batches.values()), 1)


INTEGER_DTYPES = ("i32", "i64")
# tokens checked against the vocabulary per chunk: bounded memory for a stream of any length
_SCAN_CHUNK = 1 << 24


def check_tokens(tokens: Any, where: str) -> np.ndarray:
    """`tokens` as a 1-D integer array (a memory map stays one: nothing is read here), or one
    error naming `where`."""
    if isinstance(tokens, np.lib.npyio.NpzFile):
        raise LaminaError(f"{where}: an .npz archive; the tokens are one .npy array")
    a = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    if a.dtype.kind not in "iu":
        raise LaminaError(f"{where}: tokens of dtype {a.dtype}; a token stream is integers "
                          "(uint16 or int32)")
    if a.ndim != 1:
        raise LaminaError(f"{where}: tokens of shape {tuple(a.shape)}; a token stream is 1-D")
    return a


def first_outside(tokens: np.ndarray, vocab: int) -> tuple[int, int] | None:
    """(position, token) of the first token outside [0, vocab), or None; read in chunks."""
    for start in range(0, len(tokens), _SCAN_CHUNK):
        chunk = np.asarray(tokens[start:start + _SCAN_CHUNK])
        bad = chunk >= vocab
        if chunk.dtype.kind == "i":
            bad |= chunk < 0
        if bad.any():
            at = int(np.argmax(bad))
            return start + at, int(chunk[at])
    return None


@dataclass
class TokenWindows:
    """Random windows of a token stream for an input and a target argument (module docstring:
    nanoGPT's loader, each step's windows a function of the seed and the step)."""

    tokens: np.ndarray
    batch: int
    seq: int
    seed: int
    input_dtype: np.dtype
    target_dtype: np.dtype

    def starts(self, stream: int, index: int | None, count: int) -> np.ndarray:
        key = [self.seed, stream] if index is None else [self.seed, stream, index]
        return np.random.default_rng(key).integers(0, len(self.tokens) - self.seq, size=count)

    def windows(self, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets) of shape [len(starts), seq]: tokens [s, s + seq), [s + 1, s + seq + 1)."""
        chunk = np.asarray(self.tokens[starts[:, None] + np.arange(self.seq + 1)])
        return (np.ascontiguousarray(chunk[:, :-1], self.input_dtype),
                np.ascontiguousarray(chunk[:, 1:], self.target_dtype))

    def step_batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        return self.windows(self.starts(0, step, self.batch))


def _token_arguments(forward: FuncOp, input_arg: str | None, target_arg: str | None, where: str
                     ) -> tuple[int, int]:
    """The argument indices the token windows feed (module docstring), checked."""
    from lamina.backends.interface import arg_names
    from lamina.ir.ops.opbase import tensor_info

    names = arg_names(forward)
    types = forward.function_type.inputs.data
    integers = [i for i, t in enumerate(types) if tensor_info(t).dtype in INTEGER_DTYPES]
    chosen: dict[str, int] = {}
    for which, name in (("input", input_arg), ("target", target_arg)):
        if name is None:
            continue
        if name not in names:
            raise LaminaError(f"{where}: the {which} argument '{name}' is no argument of "
                              f"@{forward.sym_name.data} (arguments: {', '.join(names)})")
        chosen[which] = names.index(name)
        if chosen[which] not in integers:
            raise LaminaError(f"{where}: the {which} argument '{name}' is {types[chosen[which]]}; "
                              "token windows feed i32 or i64 arguments")
    free = [i for i in integers if i not in chosen.values()]
    for which in ("input", "target"):
        if which not in chosen:
            if not free:
                raise LaminaError(f"{where}: @{forward.sym_name.data} has {len(integers)} "
                                  "integer argument(s); token windows feed two, an input and a "
                                  "target (default: the first two integer arguments)")
            chosen[which] = free.pop(0)
    i_in, i_tgt = chosen["input"], chosen["target"]
    if i_in == i_tgt:
        raise LaminaError(f"{where}: the input and the target are the same argument "
                          f"'{names[i_in]}'")
    if tensor_info(types[i_in]).shape != tensor_info(types[i_tgt]).shape:
        raise LaminaError(f"{where}: the input '{names[i_in]}' is {types[i_in]} and the target "
                          f"'{names[i_tgt]}' {types[i_tgt]}; the windows need one shape "
                          "[batch, seq]")
    return i_in, i_tgt


def _token_windows(forward: FuncOp, tokens: Any, where: str, seq: int | None, batch: int | None,
                   input_arg: str | None, target_arg: str | None, seed: int
                   ) -> tuple[TokenWindows, str, str, int | None]:
    """The windows of `tokens` for `forward`, the input's and target's names, the vocabulary
    (None when the input feeds no gather), every token checked against it."""
    from lamina.backends.inputs import index_rows
    from lamina.backends.interface import arg_names
    from lamina.ir.core.dtypes import STORAGE
    from lamina.ir.ops.opbase import tensor_info

    stream = check_tokens(tokens, where)
    i_in, i_tgt = _token_arguments(forward, input_arg, target_arg, where)
    names, types = arg_names(forward), forward.function_type.inputs.data
    shape = tensor_info(types[i_in]).shape
    if len(shape) != 2:
        raise LaminaError(f"{where}: the input '{names[i_in]}' is {types[i_in]}; token windows "
                          "are [batch, seq]")
    want = (batch if batch is not None else shape[0], seq if seq is not None else shape[1])
    if want != shape:
        raise LaminaError(f"{where}: batch {want[0]}, seq {want[1]} do not fit the input "
                          f"'{names[i_in]}' of @{forward.sym_name.data}: {types[i_in]} takes "
                          f"[batch, seq] = [{shape[0]}, {shape[1]}]")
    if len(stream) < shape[1] + 1:
        raise LaminaError(f"{where}: {len(stream)} tokens; a window of seq {shape[1]} needs at "
                          f"least {shape[1] + 1}")
    vocab = index_rows(forward).get(i_in)
    if vocab is not None and (bad := first_outside(stream, vocab)) is not None:
        raise LaminaError(f"{where}: token {bad[1]} at position {bad[0]} is outside the "
                          f"vocabulary of @{forward.sym_name.data}: '{names[i_in]}' indexes a "
                          f"table of {vocab} rows")
    windows = TokenWindows(stream, shape[0], shape[1], seed,
                           np.dtype(STORAGE[tensor_info(types[i_in]).dtype]),
                           np.dtype(STORAGE[tensor_info(types[i_tgt]).dtype]))
    return windows, names[i_in], names[i_tgt], vocab


class Trainer:
    """A compiled training step and its state (module docstring)."""

    def __init__(self, module: ModuleOp, data: Mapping[str, np.ndarray] | None = None, *,
                 entry: str | None = None, init: Mapping[str, np.ndarray] | None = None,
                 seed: int = 0, pipeline: str = "", backend: str = "numpy",
                 steps: int | None = None, data_name: str = "data", init_name: str = "init",
                 tokens: np.ndarray | None = None, seq: int | None = None,
                 batch: int | None = None, input_arg: str | None = None,
                 target_arg: str | None = None, tokens_name: str = "tokens",
                 eval_data: Mapping[str, np.ndarray] | None = None,
                 eval_tokens: np.ndarray | None = None, eval_batches: int = 8,
                 eval_every: int = 0, eval_name: str = "eval data", mesh: str | None = None,
                 **options: Any) -> None:
        """`options`: the `Hyper` fields (optimizer, lr, weight_decay, beta1, beta2, eps,
        momentum, lr_schedule, warmup, grad_clip, accumulate, mixed_precision, zero), then the
        backend's
        (`lamina.compile`).
        `steps` is the run's length, which the cosine schedule decays over (default: the
        `steps` of the first `run`). `data` (batches) or `tokens` (a stream, with `seq`,
        `batch`, `input_arg`, `target_arg`) is the training data, `eval_data` or `eval_tokens`
        (`eval_batches` windows) what `evaluate` and every `eval_every`-th step measure (module
        docstring). `data_name` / `init_name` / `tokens_name` / `eval_name` name the sources in
        messages. `mesh` ("AXIS=SIZE", e.g. "data=8") trains data-parallel: the data
        arguments' batch split over that mesh axis (module docstring, "Data parallel")."""
        import lamina
        from lamina.analysis.placed import placed_mesh
        from lamina.backends.inputs import index_rows
        from lamina.backends.interface import arg_names, find_entry
        from lamina.ir.buffers.updates import initial_values, roles_of, updates_of
        from lamina.ir.core.diagnostics import error_at
        from lamina.ir.core.dtypes import STORAGE
        from lamina.ir.ops.opbase import tensor_info

        hyper_keys = set(Hyper.__dataclass_fields__)
        self.hyper = Hyper(**{k: v for k, v in options.items() if k in hyper_keys})
        self.hyper.check()
        backend_options = {k: v for k, v in options.items() if k not in hyper_keys}
        if isinstance(backend_options.get("target"), str):   # read once, for both compiles
            from lamina.ir.mesh.target import load_target

            backend_options["target"] = load_target(backend_options["target"])
        self.target: Target | None = backend_options.get("target")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise LaminaError(f"seed must be a non-negative integer, got {seed!r}")
        self.seed, self.steps = seed, steps
        own = module.clone()
        forward = find_entry(own, entry)
        self.entry = forward.sym_name.data
        outs = forward.function_type.outputs.data
        if not outs or tensor_info(outs[0]).shape != () or \
                tensor_info(outs[0]).dtype not in ("f16", "bf16", "f32", "f64"):
            got = str(outs[0]) if outs else "nothing"
            raise error_at(forward, f"@{self.entry} returns {got} first; training needs a "
                           "scalar float loss as its first result")
        names = arg_names(forward)
        for flag, value in (("eval_batches", eval_batches), ("eval_every", eval_every)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise LaminaError(f"{flag} must be a non-negative integer, got {value!r}")
        self._windows: TokenWindows | None = None
        self.vocab: int | None = None   # the rows of the table the token input indexes
        self.batches: int | None   # the number of data batches (None with a token stream)
        if tokens is not None:
            if data:
                raise LaminaError(f"{data_name} and {tokens_name}: give data batches or a token "
                                  "stream, not both")
            self._windows, input_name, target_name, self.vocab = _token_windows(
                forward, tokens, tokens_name, seq, batch, input_arg, target_arg, seed)
            self.data, self.batches = {}, None
            self.data_names = [input_name, target_name]
            self.tokens_per_step: int | None = self._windows.batch * self._windows.seq
        else:
            given = [k for k, v in (("seq", seq), ("batch", batch), ("input_arg", input_arg),
                                    ("target_arg", target_arg)) if v is not None]
            if given:
                raise LaminaError(f"{', '.join(given)}: apply to a token stream (tokens=), not "
                                  "to data batches")
            self.data, self.batches = _check_data(forward, data or {}, data_name)
            self.data_names = list(self.data)
            rows = index_rows(forward)
            self.tokens_per_step = next(
                (math.prod(tensor_info(forward.function_type.inputs.data[i]).shape)
                 for i, n in enumerate(names) if n in self.data and i in rows), None)
        held = {names[i] for i, r in roles_of(forward).items() if r.name == FROZEN}
        missing = [n for n, t in zip(names, forward.function_type.inputs.data, strict=True)
                   if n not in self.data_names and n not in held
                   and tensor_info(t).dtype not in ("f16", "bf16", "f32", "f64")]
        if missing:
            raise LaminaError(f"{data_name}: no array for argument{'s' if len(missing) > 1 else ''}"
                              f" {', '.join(missing)} of @{self.entry} (integer and boolean "
                              "arguments are data, not trained)")
        # the eval data is checked before any compilation, like the data
        self.eval_every = eval_every
        self._eval_tokens = None if eval_tokens is None else \
            self._check_eval_tokens(forward, eval_tokens, eval_name)
        self._eval_count = eval_batches
        if eval_data is not None and eval_tokens is not None:
            raise LaminaError(f"{eval_name}: give eval batches or an eval token stream, not both")
        self._eval: list[dict[str, np.ndarray]] = []
        if eval_data is not None:
            self._eval = self._eval_from_data(forward, eval_data, eval_name)
        self._draw_eval_tokens()
        if eval_every and not self._eval:
            raise LaminaError(f"eval_every={eval_every} needs eval_data or eval_tokens")
        data_args = [n for n in names if n in self.data_names]
        axis = "data"
        if mesh is not None:
            axis, size = parse_mesh(mesh)
            if (already := placed_mesh(forward)) is not None:
                raise error_at(forward, f"mesh={mesh}: @{self.entry} is already placed on mesh "
                               f"@{already.sym_name.data}; a placed program trains on its own "
                               "placement, so give no mesh")
            if not data_args:
                raise LaminaError(f"mesh={mesh}: @{self.entry} has no data argument whose batch "
                                  "could be split")
            lamina.apply(own, f"place-batch{{func={self.entry} data={','.join(data_args)} "
                         f"axis={axis} size={size}}}")
        if self.hyper.zero and mesh is None and placed_mesh(forward) is None:
            raise LaminaError(f"zero={self.hyper.zero} shards the optimizer over a mesh axis; "
                              f"@{self.entry} is not placed: give a mesh (lamina-train --mesh "
                              "data=N)")
        lamina.apply(own, self.hyper.pipeline(self.entry, data_args, axis))
        if placed_mesh(find_entry(own, f"{self.entry}_step")) is not None:
            lamina.apply(own, placement_pipeline(backend_options.get("target")))
        if pipeline:
            lamina.apply(own, pipeline)
        self.module = own
        step = find_entry(own, f"{self.entry}_step")
        self.step_func: FuncOp = step
        self.arg_names = arg_names(step)
        roles = {i: r.name for i, r in roles_of(step).items()}
        self.updates = updates_of(step)
        loose = [r for r in range(len(step.function_type.outputs.data)) if r not in self.updates]
        if len(loose) != 1:
            raise LaminaError(f"@{step.sym_name.data}: {len(loose)} results replace no argument; "
                              "the step must return exactly one (the loss)")
        self._loss = loose[0]
        self._lr = next(i for i, r in roles.items() if r == "learning_rate")
        self._data_index = {self.arg_names.index(n): n for n in self.data_names}
        self.state_roles = {self.arg_names[i]: r for i, r in roles.items() if r in STATE_ROLES}
        self.frozen_names = [self.arg_names[i] for i, r in roles.items() if r == FROZEN]
        params = [i for i, r in roles.items() if r == "parameter"]
        self._args: list[Any] = [None] * len(self.arg_names)
        self._init_name = init_name
        if init is not None:
            self._set_parameters(init, params + self._frozen_indices(), init_name)
        else:
            for i, a in initializer(step, params, seed).items():
                self._args[i] = a
        for i, r in roles.items():
            if r in ("first_moment", "second_moment", "momentum_buffer", "step_count",
                     "loss_scale", "good_steps"):   # zeros, or the value the IR states
                t = tensor_info(step.function_type.inputs.data[i])
                first = initial_values(step).get(i, 0.0)
                self._args[i] = np.full(t.shape, first, STORAGE[t.dtype])
        left = [self.arg_names[i] for i, a in enumerate(self._args)
                if a is None and i != self._lr and i not in self._data_index
                and self.arg_names[i] not in self.frozen_names]
        if left:
            raise LaminaError(f"@{step.sym_name.data}: no value for argument(s) {', '.join(left)}"
                              " (neither data, a parameter nor optimizer state)")
        self.done = 0   # steps done
        self.checkpoint_steps: int | None = None   # the steps of the run a checkpoint came from
        # the NumPy backends make their checked call (capacities included) inside compile, on
        # zeros: the bytes a call holds do not depend on its data, so an overflow there is
        # step 1's, reported as such
        with self._overflow(1, f"the training step @{step.sym_name.data}"):
            self.executable: Executable = lamina.compile(own, step.sym_name.data, backend,
                                                         donate=True, **backend_options)
        self.backend = backend
        self.history: list[StepRecord] = []   # every record this trainer's steps made
        self.forward_executable: Executable | None = None
        if self._eval:   # the forward function, compiled once beside the step
            with self._overflow(eval_every, f"the eval forward @{self.entry}"):
                self.forward_executable = lamina.compile(own, self.entry, backend,
                                                         **backend_options)
            self._forward_names = arg_names(find_entry(own, self.entry))

    @contextmanager
    def _overflow(self, step: int, what: str) -> Iterator[None]:
        """A tier overflow of checked execution inside the block, said as the training step's:
        `step N: <what> does not fit target T: <the overflow>`, with a note on the plan that
        makes it fit (the same position, so the tools still point at the op)."""
        from lamina.backends.interface import TierOverflow

        try:
            yield
        except TierOverflow as e:
            spec = e.target
            if self.target is not None and not self.target.source.startswith("<builtin"):
                spec = self.target.source   # a .toml file: the pass reads it by its path
            raise TierOverflow(
                f"step {step}: {what} does not fit tier '{e.tier}' of target '{e.target}': "
                f"{e.message}", e.loc, e.tier, e.live, e.capacity, e.target,
                [f"a step holds the same bytes whatever its data; a plan of its tiers makes it "
                 f"fit: pipeline (lamina-train -p) 'annotate-lifetimes,assign-memory-tiers"
                 f"{{target={spec}}}'"]) from None

    def _eval_from_data(self, forward: FuncOp, eval_data: Mapping[str, np.ndarray], where: str
                        ) -> list[dict[str, np.ndarray]]:
        arrays, count = _check_data(forward, eval_data, where)
        if sorted(arrays) != sorted(self.data_names):
            raise LaminaError(f"{where}: it has arrays for {', '.join(sorted(arrays)) or 'nothing'};"
                              f" the data arguments are {', '.join(sorted(self.data_names))}")
        return [{n: a[j] for n, a in arrays.items()} for j in range(count)]

    def _check_eval_tokens(self, forward: FuncOp, eval_tokens: Any, where: str) -> np.ndarray:
        if self._windows is None:
            raise LaminaError(f"{where}: an eval token stream needs a training token stream "
                              "(tokens=); with data batches give eval_data")
        stream = check_tokens(eval_tokens, where)
        if len(stream) < self._windows.seq + 1:
            raise LaminaError(f"{where}: {len(stream)} tokens; a window of seq "
                              f"{self._windows.seq} needs at least {self._windows.seq + 1}")
        if self.vocab is not None and (bad := first_outside(stream, self.vocab)) is not None:
            raise LaminaError(f"{where}: token {bad[1]} at position {bad[0]} is outside the "
                              f"vocabulary of @{forward.sym_name.data}: '{self.data_names[0]}' "
                              f"indexes a table of {self.vocab} rows")
        return stream

    def _draw_eval_tokens(self) -> None:
        """The fixed eval windows of the eval token stream, from the seed (module docstring)."""
        if self._eval_tokens is None or self._windows is None:
            return
        w = self._windows
        draw = TokenWindows(self._eval_tokens, w.batch, w.seq, w.seed, w.input_dtype,
                            w.target_dtype)
        x, y = draw.windows(draw.starts(1, None, self._eval_count * w.batch))
        self._eval = [{self.data_names[0]: x[k * w.batch:(k + 1) * w.batch],
                       self.data_names[1]: y[k * w.batch:(k + 1) * w.batch]}
                      for k in range(self._eval_count)]

    def _set_parameters(self, init: Mapping[str, np.ndarray], params: list[int], where: str
                        ) -> None:
        """The trained and the frozen arguments (`params`, both) from `init`, every one of them."""
        wanted = {self.arg_names[i]: i for i in params}
        missing = [n for n in wanted if n not in init]
        if missing:
            trained = [n for n in missing if n not in self.frozen_names]
            frozen = [n for n in missing if n in self.frozen_names]
            what = [f"trained argument{'s' if len(trained) > 1 else ''} {', '.join(trained)}"] * \
                bool(trained) + [f"frozen argument{'s' if len(frozen) > 1 else ''} "
                                 f"{', '.join(frozen)} (read, never trained)"] * bool(frozen)
            raise LaminaError(f"{where}: no array for {' and '.join(what)} (it has: "
                              f"{', '.join(sorted(init)) or 'nothing'})")
        extra = sorted(k for k in init if k not in wanted)
        if extra:
            also = f"; frozen: {', '.join(self.frozen_names)}" if self.frozen_names else ""
            raise LaminaError(f"{where}: arrays {', '.join(extra)} match no trained argument "
                              f"(trained: {', '.join(n for n in wanted if n not in self.frozen_names)}"
                              f"{also})")
        for name, i in wanted.items():
            self._args[i] = _fit(where, name, self.step_func.function_type.inputs.data[i],
                                 init[name], batched=False)

    # ---- state ---------------------------------------------------------------------------

    def _state_indices(self) -> list[int]:
        return [self.arg_names.index(n) for n in self.state_roles]

    def _frozen_indices(self) -> list[int]:
        return [self.arg_names.index(n) for n in self.frozen_names]

    @property
    def frozen(self) -> dict[str, np.ndarray]:
        """The frozen arguments (read, never trained) by name; those without a value left out."""
        return {self.arg_names[i]: np.asarray(self._args[i]) for i in self._frozen_indices()
                if self._args[i] is not None}

    def check_frozen(self) -> None:
        """Refuse to train while a frozen argument has no value (module docstring): it is no
        parameter, so no initializer draws it; its value comes from `init` or a checkpoint."""
        unset = [n for n in self.frozen_names if self._args[self.arg_names.index(n)] is None]
        if unset:
            raise LaminaError(f"{self._init_name}: no array for frozen argument"
                              f"{'s' if len(unset) > 1 else ''} {', '.join(unset)} of "
                              f"@{self.entry} (model state that is read, never trained, such as a "
                              "rotary table: no initializer draws it; give the imported weights)")

    @property
    def state(self) -> dict[str, np.ndarray]:
        """Every argument the step updates (parameters, moments, buffers, step count), by name."""
        return {self.arg_names[i]: np.asarray(self._args[i]) for i in self._state_indices()}

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """The trained parameters by argument name (what `lamina-train --save` writes)."""
        return {n: np.asarray(self._args[self.arg_names.index(n)])
                for n, r in self.state_roles.items() if r == "parameter"}

    def lr(self, step: int) -> float:
        """The learning rate of step `step` (from 0)."""
        return lr_at(self.hyper, step, self.steps if self.steps is not None else step + 1)

    # ---- the loop ------------------------------------------------------------------------

    def evaluate(self) -> float:
        """The mean forward loss over the eval batches with the current parameters."""
        if self.forward_executable is None:
            raise LaminaError("nothing to evaluate on: give the Trainer eval_data or eval_tokens")
        losses = []
        for batch in self._eval:
            args = [batch[n] if n in batch else self._args[self.arg_names.index(n)]
                    for n in self._forward_names]
            run = self.forward_executable(args)
            losses.append(float(np.asarray(next(iter(run.outputs.values())))))
        return float(np.mean(losses))

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """The data arrays step `step` (from 0) reads, by argument name."""
        if self._windows is not None:
            x, y = self._windows.step_batch(step)
            return {self.data_names[0]: x, self.data_names[1]: y}
        assert self.batches is not None
        return {n: self.data[n][step % self.batches] for n in self.data_names}

    def step(self) -> StepRecord:
        """One step: the next batch, the schedule's rate, one call, the results fed back."""
        self.check_frozen()
        i = self.done
        rate = self.lr(i)
        args = self._args
        args[self._lr] = np.asarray(rate, np.float32)
        batch = self.batch(i)
        for k, name in self._data_index.items():
            args[k] = batch[name]
        start = time.perf_counter()
        with self._overflow(i + 1, f"the training step @{self.step_func.sym_name.data}"):
            run = self.executable(args)
        outputs = list(run.outputs.values())
        for r, a in self.updates.items():
            args[a] = outputs[r]
        loss = float(np.asarray(outputs[self._loss]))
        seconds = time.perf_counter() - start
        self.done = i + 1
        if not math.isfinite(loss):
            raise NonFiniteLoss(self.done, loss)
        per_second = self.tokens_per_step / seconds if self.tokens_per_step and seconds > 0 \
            else None
        evaluated = None
        if self.eval_every and self.done % self.eval_every == 0:
            with self._overflow(self.done, f"the eval forward @{self.entry}"):
                evaluated = self.evaluate()
            if not math.isfinite(evaluated):
                raise NonFiniteLoss(self.done, evaluated, "eval loss")
        peaks = None
        if self.target is not None and isinstance(run.stats.get("peak_bytes"), dict):
            measured = run.stats["peak_bytes"]
            peaks = {t.name: int(measured.get(t.name, 0)) for t in self.target.tiers}
        record = StepRecord(self.done, loss, float(np.float32(rate)), seconds, per_second,
                            evaluated, peaks)
        self.history.append(record)
        return record

    def peak_bytes(self) -> dict[str, int] | None:
        """The most bytes per device held in each of the target's tiers over this trainer's
        steps (None without a target or before a step)."""
        peaks = [r.peak_bytes for r in self.history if r.peak_bytes is not None]
        if not peaks:
            return None
        return {t: max(p.get(t, 0) for p in peaks) for t in peaks[0]}

    def run(self, steps: int | None = None, on_step: Callable[[StepRecord], None] | None = None
            ) -> Iterator[StepRecord]:
        """Steps until `steps` are done in all (default: the trainer's `steps`), yielding each."""
        total = steps if steps is not None else self.steps
        if total is None:
            raise LaminaError("how many steps: give steps= to the Trainer or to run()")
        if self.steps is None:
            self.steps = total
        while self.done < total:
            record = self.step()
            if on_step is not None:
                on_step(record)
            yield record

    # ---- checkpoints ---------------------------------------------------------------------

    def data_meta(self) -> dict[str, Any]:
        """What the data is, as a checkpoint records it: a resume must read the same."""
        if self._windows is not None:
            return {"kind": "tokens", "tokens": len(self._windows.tokens),
                    "batch": self._windows.batch, "seq": self._windows.seq,
                    "input": self.data_names[0], "target": self.data_names[1]}
        return {"kind": "batches", "batches": self.batches}

    def data_position(self) -> int:
        """Where the data stands after `done` steps: the next batch's index, or with a token
        stream the windows drawn so far (each step's windows are a function of it and the
        seed)."""
        return self.done if self.batches is None else self.done % self.batches

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"entry": self.entry, "data_position": self.data_position(),
                "data_batches": self.batches, "data": self.data_meta(), "seed": self.seed,
                "steps": self.steps, "options": asdict(self.hyper), "roles": self._saved_roles()}

    def _frozen_words(self) -> str:
        return f" and reads frozen {', '.join(self.frozen_names)}" if self.frozen_names else ""

    def _saved_roles(self) -> dict[str, str]:
        """The role of each array a checkpoint holds: the updated arguments, then the frozen."""
        return {**self.state_roles, **dict.fromkeys(self.frozen_names, FROZEN)}

    def save_checkpoint(self, folder: str) -> None:
        """Write the state after `done` steps into `folder`, atomically (`lamina.checkpoint`)."""
        from lamina.checkpoint import write_checkpoint

        self.check_frozen()
        write_checkpoint(folder, self.done, {**self.state, **self.frozen}, self.checkpoint_meta())

    def load_checkpoint(self, folder: str) -> None:
        """Restore the state written by `save_checkpoint` (the same program, optimizer and
        data shape); anything that does not match is one LaminaError."""
        from lamina.checkpoint import read_checkpoint
        from lamina.ir.core.dtypes import STORAGE
        from lamina.ir.ops.opbase import tensor_info

        meta, arrays = read_checkpoint(folder)
        where = f"cannot resume from '{folder}'"
        if meta.get("entry") != self.entry:
            raise LaminaError(f"{where}: it trains @{meta.get('entry')}, this run @{self.entry}")
        saved = self._saved_roles()
        if meta.get("roles") != saved or sorted(arrays) != sorted(saved):
            raise LaminaError(f"{where}: it holds {', '.join(sorted(arrays)) or 'nothing'}; this "
                              f"step updates {', '.join(sorted(self.state_roles))}"
                              f"{self._frozen_words()} (another program or optimizer?)")
        data = meta.get("data", {"kind": "batches", "batches": meta.get("data_batches")})
        if data != self.data_meta():
            if isinstance(data, dict) and data.get("kind") == "batches" and self.batches:
                raise LaminaError(f"{where}: it was trained on {data.get('batches')} batches, "
                                  f"the data has {self.batches}")
            raise LaminaError(f"{where}: it was trained on {_describe(data)}, this run reads "
                              f"{_describe(self.data_meta())}")
        seed = meta.get("seed")
        for name in saved:
            info = tensor_info(self.step_func.function_type.inputs.data[self.arg_names.index(name)])
            a = arrays[name]
            if a.shape != info.shape or a.dtype != STORAGE[info.dtype]:
                raise LaminaError(f"{where}: '{name}' is {a.dtype}{list(a.shape)}, the argument "
                                  f"is {STORAGE[info.dtype]}{list(info.shape)}")
        for name in saved:
            self._args[self.arg_names.index(name)] = arrays[name]
        self.done = int(meta["step"])
        if isinstance(seed, int) and not isinstance(seed, bool) and seed != self.seed:
            # the windows a step draws follow the seed: the checkpoint's, so the resumed run
            # reads what the uninterrupted one would
            self.seed = seed
            if self._windows is not None:
                self._windows.seed = seed
                self._draw_eval_tokens()
        self.checkpoint_steps = meta.get("steps") if isinstance(meta.get("steps"),
                                                                            int) else None
        if self.steps is None:
            self.steps = self.checkpoint_steps


def _describe(data: Any) -> str:
    """A checkpoint's `data` record in words."""
    if isinstance(data, dict) and data.get("kind") == "tokens":
        return (f"a stream of {data.get('tokens')} tokens in windows [{data.get('batch')}, "
                f"{data.get('seq')}] for '{data.get('input')}' and '{data.get('target')}'")
    if isinstance(data, dict) and data.get("kind") == "batches":
        return f"{data.get('batches')} data batches"
    return "unknown data"


def loss_figure(records: Sequence[StepRecord], title: str = "") -> Any:
    """The figure of a run's loss, and eval loss where measured, against step; the caller
    closes it. Readable at a glance: a log y axis when the positive losses span more than
    `LOG_SCALE_SPAN` (a curve that falls from 4 to 0.01 is otherwise flat after its first
    steps), both curves labelled in a legend outside the axes (never over the curve), the eval
    points marked (there are few of them)."""
    from lamina.cli.memory_plot import pyplot

    plt = pyplot("--plot")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    try:
        steps = [r.step for r in records]
        losses = [r.loss for r in records]
        ax.plot(steps, losses, label="loss", linewidth=1.2)
        evals = [(r.step, r.eval_loss) for r in records if r.eval_loss is not None]
        if evals:
            ax.plot([e[0] for e in evals], [e[1] for e in evals], marker="o", markersize=4,
                    label="eval loss", linewidth=1.2)
        values = losses + [e[1] for e in evals]
        log = bool(values) and min(values) > 0 and max(values) / min(values) > LOG_SCALE_SPAN
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (log scale)" if log else "loss")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        ax.set_title(title or "training loss")
        fig.tight_layout()
    except BaseException:
        plt.close(fig)   # not returned: nobody else can close it
        raise
    return fig


def save_loss_plot(records: Sequence[StepRecord], path: str, title: str = "") -> None:
    """`loss_figure` written to `path` (the format from its extension, PNG without one), only
    once the whole image is drawn: an error leaves no partial file."""
    from lamina.cli.memory_plot import plot_format, pyplot
    from lamina.cli.outputs import StagedOutputs

    fmt = plot_format(path, "--plot")
    plt = pyplot("--plot")
    fig = loss_figure(records, title)
    try:
        with StagedOutputs() as out:
            out.add(path, lambda f: fig.savefig(f, format=fmt, bbox_inches="tight"))
            out.commit()
    finally:
        plt.close(fig)


def train(module: ModuleOp, data: Mapping[str, np.ndarray] | None = None,
          steps: int | None = None, checkpoint: str | None = None, checkpoint_every: int = 0,
          resume: str | None = None, on_step: Callable[[StepRecord], None] | None = None,
          plot: str | None = None, **options: Any) -> Trainer:
    """Train for `steps` steps in all (module docstring) and return the Trainer (its
    `parameters`, `state`, `done`, `history`). `options` are the Trainer's (`tokens`, `seq`,
    `batch`, `eval_every`, `eval_data`, ... too). With `resume`, the state comes from that
    checkpoint folder and training continues to `steps`; with `checkpoint`, a checkpoint is
    written there every `checkpoint_every` steps (0: only at the end) and at the end; with
    `plot`, the loss curve of this call's steps (`save_loss_plot`) at the end."""
    if steps is None:
        raise LaminaError("how many steps: give train() steps=")
    trainer = Trainer(module, data, steps=steps, **options)
    if resume is not None:
        trainer.load_checkpoint(resume)
        trainer.steps = steps
    for record in trainer.run(steps):
        if on_step is not None:
            on_step(record)
        if checkpoint is not None and checkpoint_every and record.step % checkpoint_every == 0 \
                and record.step < steps:
            trainer.save_checkpoint(checkpoint)
    if checkpoint is not None:
        trainer.save_checkpoint(checkpoint)
    if plot is not None:
        save_loss_plot(trainer.history, plot, f"@{trainer.entry}")
    return trainer
