"""`lamina-train`: train a forward function that returns a scalar loss.

    lamina-train PROGRAM.mlir (--data DATA.npz | --tokens TOKENS.npy [--seq T --batch B]
                 [--input-arg NAME --target-arg NAME]) --steps N [--init PARAMS.npz | --seed S]
                 [--optimizer adamw|sgd] [--lr LR] [--weight-decay WD] [--beta1 B1 --beta2 B2
                 --eps EPS] [--momentum MU] [--lr-schedule constant|cosine] [--warmup W]
                 [--grad-clip C] [--accumulate K] [--mixed-precision bf16|f16] [--zero 1|2|3]
                 [--log LOG.jsonl] [--save FINAL.npz] [--plot LOSS.png]
                 [--eval-every K (--eval-data EVAL.npz | --eval-tokens TOKENS.npy)]
                 [--checkpoint DIR [--checkpoint-every K]] [--resume DIR]
                 [--entry NAME] [-p PIPELINE] [--backend NAME] [--threads N] [--target T]
                 [--mesh AXIS=SIZE] [--devices N]

The loop is `lamina.Trainer` (`lamina.training`: which arguments are data, parameters and
state, the initializer, the schedules, the checkpoint contents); this module is its command
line: reading the files, the progress bar, the log and the files it writes.

- `--data DATA.npz`: one array per data argument, keyed by argument name, whose leading dim
  indexes batches: step i (from 0) uses batch i mod N. Every float argument it does not name is
  trained, except a `frozen` one (`lamina.role = "frozen"`: the torch importer's buffers, such
  as a rotary table's inv_freq), which is read, never trained. `--init PARAMS.npz`: the trained
  and the frozen arguments by name (each of them: `lamina-import`'s weights hold both); without
  it the documented initializer draws the trained ones from `--seed`, and a program with a
  frozen argument is refused, naming it (no drawn rotary table means anything; a `--resume`
  reads it from its checkpoint).
- `--tokens TOKENS.npy` (instead of `--data`): a 1-D uint16 or int32 token stream, memory-mapped
  (`np.load(mmap_mode="r")`, never a pickle), cut into random windows from `--seed` as nanoGPT
  does: `--input-arg` (default: the first integer argument) gets [batch, seq] windows, and
  `--target-arg` (default: the second) the same windows one token on. `--seq` and `--batch`
  default to the input argument's shape and must match it; a token outside the vocabulary (the
  rows of the table the input indexes) is one error before training.
- `--eval-every K` with `--eval-data EVAL.npz` (batches like `--data`) or `--eval-tokens
  TOKENS.npy` (`--eval-batches` fixed windows, default 8): the mean forward loss on them after
  every K-th step, logged as `eval_loss`.
- `--log LOG.jsonl`: one JSON object per step, `{"step", "loss", "lr", "step_seconds"}`, plus
  `tokens_per_second` where known and `eval_loss` on the steps that evaluate, written as the run
  goes (a resumed run keeps the lines up to its checkpoint's step and goes on).
- `--plot LOSS.png`: loss and eval loss against step (`lamina.training.loss_figure`), written
  when the run ends well; a resumed run with `--log` plots the kept lines too.
- `--save FINAL.npz`: the final parameters by name, written when the run ends well.
- `--checkpoint DIR`: a checkpoint every `--checkpoint-every K` steps and at the end, each written
  atomically (`lamina.checkpoint`); `--resume DIR` continues from one to `--steps` in all.
- `--mesh data=8`: data parallel, the batch split over that mesh axis and the parameters
  replicated (`place-batch`, then propagate-sharding and insert-collectives with `--target`
  after append-optimizer: `lamina.training`); a program already placed trains on its own
  placement without it. `--devices N` (backend jax, as in lamina-run) is the device count.
- A progress bar (tqdm, the `train` extra) on stderr when stderr is a terminal; quiet otherwise.
- A NaN or infinite loss stops the run: a diagnostic naming the step, exit 1, the last
  checkpoint kept and no `--save`.
Every check that can be made before training (flags, files, data shapes, the initial
parameters, a checkpoint to resume) is made before anything is written, so bad input leaves
no file behind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from collections.abc import Sequence
from typing import IO, Any

import lamina
import numpy as np
from lamina.backends.inputs import array_file_error
from lamina.backends.registry import backend_names, get_backend
from lamina.cli.entry import guarded
from lamina.cli.memory_plot import plot_format
from lamina.cli.outputs import check_destination, save_npz_atomic
from lamina.cli.run import check_backend_flags
from lamina.ir.core.diagnostics import LaminaError, UsageError
from lamina.ir.text.source import load
from lamina.training import (
    OPTIMIZERS,
    SCHEDULES,
    StepRecord,
    Trainer,
    parse_mesh,
    save_loss_plot,
)

PROG = "lamina-train"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # exit 1, one line, like every other error
        raise UsageError(self.prog, message)


def arg_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Train a Lamina forward function (a scalar loss).")
    p.add_argument("file", help="program (.mlir): a function returning a scalar loss first")
    p.add_argument("--version", action="version", version=f"{PROG} {lamina.__version__}")
    p.add_argument("--entry", default=None, help="the forward function (default: the only one)")
    p.add_argument("--data", default=None, metavar="DATA.npz",
                   help="one array per data argument; the leading dim indexes batches")
    p.add_argument("--tokens", default=None, metavar="TOKENS.npy",
                   help="a 1-D uint16/int32 token stream (memory-mapped), in random windows")
    p.add_argument("--seq", type=int, default=None, metavar="T",
                   help="tokens per window (default: the input argument's last dim)")
    p.add_argument("--batch", type=int, default=None, metavar="B",
                   help="windows per step (default: the input argument's first dim)")
    p.add_argument("--input-arg", default=None, metavar="NAME",
                   help="the argument the windows feed (default: the first integer argument)")
    p.add_argument("--target-arg", default=None, metavar="NAME",
                   help="the argument the windows shifted by one token feed (default: the "
                        "second integer argument)")
    p.add_argument("--eval-every", type=int, default=0, metavar="K",
                   help="evaluate the forward loss every K steps (default 0: never)")
    p.add_argument("--eval-data", default=None, metavar="EVAL.npz",
                   help="eval batches, keyed like --data")
    p.add_argument("--eval-tokens", default=None, metavar="TOKENS.npy",
                   help="an eval token stream (with --tokens)")
    p.add_argument("--eval-batches", type=int, default=8, metavar="N",
                   help="fixed windows of --eval-tokens to evaluate on (default 8)")
    p.add_argument("--init", default=None, metavar="PARAMS.npz",
                   help="initial values of the trained and the frozen arguments, by name "
                        "(default: the initializer, from --seed; frozen ones need --init)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the initializer and of the token windows (default 0; a resume "
                        "follows its checkpoint's)")
    p.add_argument("--steps", type=int, required=True, metavar="N", help="steps in all")
    p.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (default 0)")
    p.add_argument("--lr-schedule", default="constant", choices=SCHEDULES)
    p.add_argument("--warmup", type=int, default=0, metavar="W",
                   help="steps of linear warmup (default 0)")
    p.add_argument("--grad-clip", type=float, default=0.0, metavar="C",
                   help="clip the gradients' global L2 norm to C (default 0: off)")
    p.add_argument("--accumulate", type=int, default=1, metavar="K",
                   help="split each step's batch into K micro-batches whose gradients are summed "
                   "before one update (accumulate-gradients; default 1)")
    p.add_argument("--mixed-precision", default=None, choices=("bf16", "f16"),
                   help="compute forward and backward in bf16 / f16 (f16 with dynamic loss "
                   "scaling), master weights and moments in f32 (mixed-precision)")
    p.add_argument("--zero", type=int, default=0, choices=(1, 2, 3), metavar="STAGE",
                   help="shard the optimizer state (1, 2) and the parameters (3) over the mesh's "
                   "data axis (shard-optimizer, ZeRO; needs --mesh or a placed program)")
    p.add_argument("--log", default=None, metavar="LOG.jsonl", help="one JSON line per step")
    p.add_argument("--save", default=None, metavar="FINAL.npz",
                   help="write the final parameters by name")
    p.add_argument("--plot", default=None, metavar="LOSS.png",
                   help="plot loss and eval loss against step (format from the extension)")
    p.add_argument("--checkpoint", default=None, metavar="DIR", help="checkpoint folder")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                   help="also checkpoint every K steps (default 0: only at the end)")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue from the checkpoint in DIR to --steps")
    p.add_argument("-p", "--passes", default="",
                   help="pass pipeline applied to the training step (after derive-backward and "
                        "append-optimizer)")
    p.add_argument("--backend", default="numpy",
                   help=f"backend to run on: {', '.join(backend_names())} (default numpy)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads for fused kernels' tile loops (results do not depend on it)")
    p.add_argument("--target", default=None,
                   help="check memory-tier capacities against this target (name or .toml); "
                        "also the cost model that places a data-parallel step")
    p.add_argument("--mesh", default=None, metavar="AXIS=SIZE",
                   help="train data-parallel: split the batch over a mesh axis of SIZE devices "
                        "(e.g. data=8)")
    p.add_argument("--devices", type=int, default=None, metavar="N",
                   help="backend jax: devices to run on (default: the mesh's size)")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Refuse a command line that could not be honoured, before any work."""
    for flag, value, least in (("--steps", args.steps, 0), ("--warmup", args.warmup, 0),
                               ("--checkpoint-every", args.checkpoint_every, 0),
                               ("--threads", args.threads, 1), ("--seed", args.seed, 0),
                               ("--devices", args.devices, 1),
                               ("--seq", args.seq, 1), ("--batch", args.batch, 1),
                               ("--eval-every", args.eval_every, 0),
                               ("--eval-batches", args.eval_batches, 1)):
        if value is not None and value < least:
            raise UsageError(PROG, f"argument {flag}: must be at least {least}, got {value}")
    for dest, value in vars(args).items():
        if value == "" and dest not in ("passes", "file"):
            raise UsageError(PROG, f"argument --{dest.replace('_', '-')}: expected a value, got ''")
    if args.mesh is not None:
        try:
            parse_mesh(args.mesh, "--mesh")
        except LaminaError as e:
            raise UsageError(PROG, f"argument {e.message}") from None
    if (args.data is None) == (args.tokens is None):
        raise UsageError(PROG, "give the training data: --data DATA.npz or --tokens TOKENS.npy"
                         if args.data is None else "--data and --tokens: give one of them")
    if args.tokens is None:
        for flag, value in (("--seq", args.seq), ("--batch", args.batch),
                            ("--input-arg", args.input_arg), ("--target-arg", args.target_arg),
                            ("--eval-tokens", args.eval_tokens)):
            if value is not None:
                raise UsageError(PROG, f"{flag} applies to --tokens TOKENS.npy")
    if args.eval_data is not None and args.eval_tokens is not None:
        raise UsageError(PROG, "--eval-data and --eval-tokens: give one of them")
    if args.eval_every and args.eval_data is None and args.eval_tokens is None:
        raise UsageError(PROG, "--eval-every needs --eval-data EVAL.npz or --eval-tokens "
                         "TOKENS.npy")
    if not args.eval_every and (args.eval_data is not None or args.eval_tokens is not None):
        raise UsageError(PROG, "--eval-data and --eval-tokens need --eval-every K")
    if args.checkpoint_every and args.checkpoint is None:
        raise UsageError(PROG, "--checkpoint-every needs --checkpoint DIR")
    if args.resume is not None and args.init is not None:
        raise UsageError(PROG, "--resume restores the parameters from its checkpoint; --init "
                         "applies to a fresh run")
    written = [(flag, path) for flag, path in (("--log", args.log), ("--save", args.save),
                                                ("--plot", args.plot)) if path is not None]
    for _, path in written:
        check_destination(path)
    for k, (flag, path) in enumerate(written):
        for other, path2 in written[k + 1:]:
            if os.path.realpath(path) == os.path.realpath(path2):
                raise UsageError(PROG, f"{flag} and {other} both write the same file")
    if args.plot is not None:
        plot_format(args.plot, "--plot")
    if args.checkpoint is not None:
        folder = args.checkpoint
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise LaminaError(f"cannot write checkpoint '{folder}': not a folder")
        parent = os.path.dirname(os.path.abspath(folder))
        if not os.path.isdir(parent):
            raise LaminaError(f"cannot write checkpoint '{folder}': no folder '{parent}'")


def read_npz(path: str, flag: str) -> dict[str, np.ndarray]:
    """Every array of an `.npz` (never a pickle), or one diagnostic naming the file."""
    try:
        if os.path.isfile(path) and not zipfile.is_zipfile(path):
            raise LaminaError(f"{flag} '{path}': not an .npz archive")
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise array_file_error(f"{flag} '{path}'", e) from None


def read_tokens(path: str, flag: str) -> np.ndarray:
    """The token stream in a `.npy`, memory-mapped (read where it lies, however long), never a
    pickle; one diagnostic naming the file for anything else."""
    try:
        if os.path.isfile(path) and zipfile.is_zipfile(path):
            raise LaminaError(f"{flag} '{path}': an .npz archive; the tokens are one .npy array")
        tokens = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise array_file_error(f"{flag} '{path}'", e) from None
    if not isinstance(tokens, np.ndarray):
        raise LaminaError(f"{flag} '{path}': not an .npy array")
    return tokens


def _log_lines_upto(path: str, step: int) -> list[str]:
    """The lines of an existing log whose step is at most `step` (what a resumed run keeps)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
        return []
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and \
                record["step"] <= step:
            kept.append(line)
    return kept


class _Progress:
    """tqdm's bar on stderr when stderr is a terminal, else nothing."""

    def __init__(self, total: int, initial: int) -> None:
        self.bar: Any = None
        self.eval_loss: float | None = None   # the last one, shown until the next
        if not sys.stderr.isatty():
            return
        try:
            from tqdm import tqdm
        except ImportError:
            print(f"{PROG}: note: no progress bar without tqdm (pip install 'lamina[train]')",
                  file=sys.stderr)
            return
        self.bar = tqdm(total=total, initial=initial, file=sys.stderr, unit="step",
                        dynamic_ncols=True)

    def update(self, record: StepRecord) -> None:
        if self.bar is not None:
            shown = {"loss": f"{record.loss:.5g}", "step_s": f"{record.step_seconds:.3g}"}
            if record.tokens_per_second is not None:
                shown["tok_s"] = f"{record.tokens_per_second:.4g}"
            if record.eval_loss is not None:
                self.eval_loss = record.eval_loss
            if self.eval_loss is not None:
                shown["eval"] = f"{self.eval_loss:.5g}"
            self.bar.set_postfix(shown, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(argv: Sequence[str] | None = None) -> int:
    args = arg_parser().parse_args(argv)
    check_args(args)
    backend = get_backend(args.backend)
    check_backend_flags(args, backend, PROG)
    module = load(args.file)
    data = read_npz(args.data, "--data") if args.data is not None else None
    tokens = read_tokens(args.tokens, "--tokens") if args.tokens is not None else None
    eval_data = read_npz(args.eval_data, "--eval-data") if args.eval_data is not None else None
    eval_tokens = read_tokens(args.eval_tokens, "--eval-tokens") \
        if args.eval_tokens is not None else None
    init = read_npz(args.init, "--init") if args.init is not None else None
    takes = set(backend.Options.__dataclass_fields__)
    options: dict[str, Any] = {k: v for k, v in (("threads", args.threads),
                                                  ("devices", args.devices))
                               if v is not None and k in takes}
    if args.target is not None:
        options["target"] = args.target
    trainer = Trainer(module, data, entry=args.entry, init=init, seed=args.seed,
                      pipeline=args.passes, backend=args.backend, steps=args.steps,
                      data_name=args.data or "--data", init_name=args.init or "--init",
                      tokens=tokens, seq=args.seq, batch=args.batch, input_arg=args.input_arg,
                      target_arg=args.target_arg, tokens_name=args.tokens or "--tokens",
                      eval_data=eval_data, eval_tokens=eval_tokens,
                      eval_batches=args.eval_batches, eval_every=args.eval_every,
                      eval_name=args.eval_data or args.eval_tokens or "--eval-data",
                      optimizer=args.optimizer, lr=args.lr, weight_decay=args.weight_decay,
                      beta1=args.beta1, beta2=args.beta2, eps=args.eps, momentum=args.momentum,
                      lr_schedule=args.lr_schedule, warmup=args.warmup,
                      grad_clip=args.grad_clip, accumulate=args.accumulate, mesh=args.mesh,
                      mixed_precision=args.mixed_precision or "", zero=args.zero,
                      **options)
    if args.resume is not None:
        trainer.load_checkpoint(args.resume)
        was = trainer.checkpoint_steps
        if args.lr_schedule == "cosine" and was is not None and was != args.steps:
            print(f"{PROG}: note: the checkpoint's run had --steps {was}; the cosine schedule now "
                  f"decays over {args.steps} steps", file=sys.stderr)
        trainer.steps = args.steps
    trainer.check_frozen()   # before anything is written
    log: IO[str] | None = None
    kept = _log_lines_upto(args.log, trainer.done) \
        if args.log is not None and args.resume is not None else []
    if args.log is not None:
        log = open(args.log, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        for line in kept:
            log.write(line + "\n")
    bar = _Progress(args.steps, min(trainer.done, args.steps))
    last: StepRecord | None = None
    try:
        for record in trainer.run(args.steps):
            if log is not None:
                log.write(json.dumps(record.as_dict()) + "\n")
                log.flush()
            bar.update(record)
            last = record
            if args.checkpoint is not None and args.checkpoint_every and \
                    record.step % args.checkpoint_every == 0 and record.step < args.steps:
                trainer.save_checkpoint(args.checkpoint)
    finally:
        bar.close()
        if log is not None:
            log.close()
    if args.checkpoint is not None:
        trainer.save_checkpoint(args.checkpoint)
    if args.save is not None:
        save_npz_atomic(args.save, trainer.parameters)
    if args.plot is not None:
        earlier = [r for line in kept if (r := StepRecord.from_dict(json.loads(line)))]
        save_loss_plot(earlier + trainer.history, args.plot, f"@{trainer.entry}")
    peaks = trainer.peak_bytes()
    if peaks is not None and trainer.target is not None:
        caps = {t.name: int(t.capacity) for t in trainer.target.tiers}
        listed = ", ".join(f"{t} {n} of {caps[t]}" for t, n in peaks.items())
        print(f"{PROG}: peak bytes per device on target '{trainer.target.name}': {listed}",
              file=sys.stderr)
    if last is not None:
        evaluated = [r for r in trainer.history if r.eval_loss is not None]
        seen = f" (eval loss {evaluated[-1].eval_loss:.6g} at step {evaluated[-1].step})" \
            if evaluated else ""
        print(f"@{trainer.entry}: step {last.step}/{args.steps} loss {last.loss:.6g} lr "
              f"{last.lr:.6g}{seen}")
    else:
        print(f"@{trainer.entry}: {trainer.done} steps done already (--steps {args.steps})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return guarded(run, argv)


if __name__ == "__main__":
    sys.exit(main())
