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
a parameter (derive-backward's default `wrt`); the moments, momentum buffers, step count and
learning rate are found by their roles (`lamina.role`, `lamina.ir.buffers.updates.ROLES`).

The data arrays are read where they are (no copy, unless their dtype needs converting), so
changing one during training changes the batches. Initial parameters: `init` (by argument
name, every parameter; the arrays are copied, since the step updates them in place), else
`initializer(seed)`: a parameter of rank >= 2 uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)] with
fan_in the product of all dims but the last (Lamina's matmul weights are [in, out]: torch's
nn.Linear bound), rank 0 and 1 (biases, norm gains) zero; drawn in argument order from
`np.random.default_rng(seed)`. Moments and buffers start at zero, the step count at 0.

Schedules (`lr_at`, step i counted from 0): `constant` is `lr`; with `warmup=W` the first W steps
ramp linearly, lr (i + 1) / W; `cosine` then decays from lr to 0 over the remaining steps,
lr (1 + cos(pi (i - W) / (steps - W))) / 2. The cosine spans the run's `steps`: a run resumed
with another `steps` than the checkpoint's follows the new span from there on (lamina-train
says so in a note).

Checkpoints (`save_checkpoint`, `Trainer.resume`): every updated argument by name, plus the step,
the data position (step mod N), N, the seed and the options (`lamina.checkpoint`), so a run
resumed from step k continues exactly as the uninterrupted run would: same state bits, same
batch, same learning rate (on the NumPy and compiled backends, whose results do not depend on
threads, the resumed run is bit-identical). A non-finite loss raises `NonFiniteLoss` naming the
step; the state then holds that step's results, and a checkpoint on disk is left as it was.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from lamina.ir.core.diagnostics import LaminaError

if TYPE_CHECKING:
    from lamina.executable import Executable
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.dialects.func import FuncOp

OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("constant", "cosine")
STATE_ROLES = ("parameter", "first_moment", "second_moment", "momentum_buffer", "step_count")


class NonFiniteLoss(LaminaError):
    """The loss of a step was NaN or infinite: training stops there."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"step {step}: the loss is {loss}; training stopped (a checkpoint "
                         "written before this step is kept)")
        self.step, self.loss = step, loss


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
        for name in ("lr", "weight_decay", "beta1", "beta2", "eps", "momentum", "grad_clip"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise LaminaError(f"{name} must be a finite number >= 0, got {value}")

    def pipeline(self, entry: str, data: list[str]) -> str:
        """derive-backward and append-optimizer for `entry`, the learning rate an input."""
        opt = [f"func={entry}_grad", f"kind={self.optimizer}", "lr-input=true",
               f"weight-decay={self.weight_decay!r}"]
        if self.optimizer == "adamw":
            opt += [f"beta1={self.beta1!r}", f"beta2={self.beta2!r}", f"eps={self.eps!r}"]
        elif self.momentum:
            opt.append(f"momentum={self.momentum!r}")
        if self.grad_clip:
            opt.append(f"grad-clip={self.grad_clip!r}")
        return f"derive-backward{{func={entry} data={','.join(data)}}}," \
               f"append-optimizer{{{' '.join(opt)}}}"


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
    """One step of training: its number (1 for the first update), loss, rate and time."""

    step: int
    loss: float
    lr: float
    step_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


class Trainer:
    """A compiled training step and its state (module docstring)."""

    def __init__(self, module: ModuleOp, data: Mapping[str, np.ndarray], *, entry: str | None = None,
                 init: Mapping[str, np.ndarray] | None = None, seed: int = 0,
                 pipeline: str = "", backend: str = "numpy", steps: int | None = None,
                 data_name: str = "data", init_name: str = "init", **options: Any) -> None:
        """`options`: the `Hyper` fields (optimizer, lr, weight_decay, beta1, beta2, eps,
        momentum, lr_schedule, warmup, grad_clip), then the backend's (`lamina.compile`).
        `steps` is the run's length, which the cosine schedule decays over (default: the
        `steps` of the first `run`). `data_name` / `init_name` name the sources in messages."""
        import lamina
        from lamina.backends.interface import arg_names, find_entry
        from lamina.ir.buffers.updates import roles_of, updates_of
        from lamina.ir.core.diagnostics import error_at
        from lamina.ir.core.dtypes import STORAGE
        from lamina.ir.ops.opbase import tensor_info

        hyper_keys = set(Hyper.__dataclass_fields__)
        self.hyper = Hyper(**{k: v for k, v in options.items() if k in hyper_keys})
        self.hyper.check()
        backend_options = {k: v for k, v in options.items() if k not in hyper_keys}
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
        self.data, self.batches = _check_data(forward, data, data_name)
        names = arg_names(forward)
        missing = [n for n, t in zip(names, forward.function_type.inputs.data, strict=True)
                   if n not in self.data and tensor_info(t).dtype not in ("f16", "bf16", "f32",
                                                                           "f64")]
        if missing:
            raise LaminaError(f"{data_name}: no array for argument{'s' if len(missing) > 1 else ''}"
                              f" {', '.join(missing)} of @{self.entry} (integer and boolean "
                              "arguments are data, not trained)")
        lamina.apply(own, self.hyper.pipeline(self.entry, [n for n in names if n in self.data]))
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
        self._data_index = {self.arg_names.index(n): n for n in self.data}
        self.state_roles = {self.arg_names[i]: r for i, r in roles.items() if r in STATE_ROLES}
        params = [i for i, r in roles.items() if r == "parameter"]
        self._args: list[Any] = [None] * len(self.arg_names)
        if init is not None:
            self._set_parameters(init, params, init_name)
        else:
            for i, a in initializer(step, params, seed).items():
                self._args[i] = a
        for i, r in roles.items():
            if r in ("first_moment", "second_moment", "momentum_buffer", "step_count"):
                t = tensor_info(step.function_type.inputs.data[i])
                self._args[i] = np.zeros(t.shape, STORAGE[t.dtype])
        left = [self.arg_names[i] for i, a in enumerate(self._args)
                if a is None and i != self._lr and i not in self._data_index]
        if left:
            raise LaminaError(f"@{step.sym_name.data}: no value for argument(s) {', '.join(left)}"
                              " (neither data, a parameter nor optimizer state)")
        self.done = 0   # steps done
        self.checkpoint_steps: int | None = None   # the steps of the run a checkpoint came from
        self.executable: Executable = lamina.compile(own, step.sym_name.data, backend,
                                                     donate=True, **backend_options)
        self.backend = backend

    def _set_parameters(self, init: Mapping[str, np.ndarray], params: list[int], where: str
                        ) -> None:
        wanted = {self.arg_names[i]: i for i in params}
        missing = [n for n in wanted if n not in init]
        if missing:
            raise LaminaError(f"{where}: no array for trained argument{'s' if len(missing) > 1 else ''}"
                              f" {', '.join(missing)} (it has: {', '.join(sorted(init)) or 'nothing'})")
        extra = sorted(k for k in init if k not in wanted)
        if extra:
            raise LaminaError(f"{where}: arrays {', '.join(extra)} match no trained argument "
                              f"(trained: {', '.join(wanted)})")
        for name, i in wanted.items():
            self._args[i] = _fit(where, name, self.step_func.function_type.inputs.data[i],
                                 init[name], batched=False)

    # ---- state ---------------------------------------------------------------------------

    def _state_indices(self) -> list[int]:
        return [self.arg_names.index(n) for n in self.state_roles]

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

    def step(self) -> StepRecord:
        """One step: the next batch, the schedule's rate, one call, the results fed back."""
        i = self.done
        rate = self.lr(i)
        args = self._args
        args[self._lr] = np.asarray(rate, np.float32)
        position = i % self.batches
        for k, name in self._data_index.items():
            args[k] = self.data[name][position]
        start = time.perf_counter()
        run = self.executable(args)
        outputs = list(run.outputs.values())
        for r, a in self.updates.items():
            args[a] = outputs[r]
        loss = float(np.asarray(outputs[self._loss]))
        seconds = time.perf_counter() - start
        self.done = i + 1
        if not math.isfinite(loss):
            raise NonFiniteLoss(self.done, loss)
        return StepRecord(self.done, loss, float(np.float32(rate)), seconds)

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

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"entry": self.entry, "data_position": self.done % self.batches,
                "data_batches": self.batches, "seed": self.seed, "steps": self.steps,
                "options": asdict(self.hyper), "roles": self.state_roles}

    def save_checkpoint(self, folder: str) -> None:
        """Write the state after `done` steps into `folder`, atomically (`lamina.checkpoint`)."""
        from lamina.checkpoint import write_checkpoint

        write_checkpoint(folder, self.done, self.state, self.checkpoint_meta())

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
        if meta.get("roles") != self.state_roles or sorted(arrays) != sorted(self.state_roles):
            raise LaminaError(f"{where}: it holds {', '.join(sorted(arrays)) or 'nothing'}; this "
                              f"step updates {', '.join(sorted(self.state_roles))} (another "
                              "program or optimizer?)")
        if meta.get("data_batches") != self.batches:
            raise LaminaError(f"{where}: it was trained on {meta.get('data_batches')} batches, "
                              f"the data has {self.batches}")
        for name in self.state_roles:
            info = tensor_info(self.step_func.function_type.inputs.data[self.arg_names.index(name)])
            a = arrays[name]
            if a.shape != info.shape or a.dtype != STORAGE[info.dtype]:
                raise LaminaError(f"{where}: '{name}' is {a.dtype}{list(a.shape)}, the argument "
                                  f"is {STORAGE[info.dtype]}{list(info.shape)}")
        for name in self.state_roles:
            self._args[self.arg_names.index(name)] = arrays[name]
        self.done = int(meta["step"])
        self.checkpoint_steps = meta.get("steps") if isinstance(meta.get("steps"),
                                                                            int) else None
        if self.steps is None:
            self.steps = self.checkpoint_steps


def train(module: ModuleOp, data: Mapping[str, np.ndarray], steps: int,
          checkpoint: str | None = None, checkpoint_every: int = 0, resume: str | None = None,
          on_step: Callable[[StepRecord], None] | None = None, **options: Any) -> Trainer:
    """Train for `steps` steps in all (module docstring) and return the Trainer (its
    `parameters`, `state`, `done`). `options` are the Trainer's. With `resume`, the state comes
    from that checkpoint folder and training continues to `steps`; with `checkpoint`, a
    checkpoint is written there every `checkpoint_every` steps (0: only at the end) and at the
    end."""
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
    return trainer
