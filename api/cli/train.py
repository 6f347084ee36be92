"""`lamina-train`: train a forward function that returns a scalar loss.

    lamina-train PROGRAM.mlir --data DATA.npz --steps N [--init PARAMS.npz | --seed S]
                 [--optimizer adamw|sgd] [--lr LR] [--weight-decay WD] [--beta1 B1 --beta2 B2
                 --eps EPS] [--momentum MU] [--lr-schedule constant|cosine] [--warmup W]
                 [--grad-clip C] [--log LOG.jsonl] [--save FINAL.npz]
                 [--checkpoint DIR [--checkpoint-every K]] [--resume DIR]
                 [--entry NAME] [-p PIPELINE] [--backend NAME] [--threads N] [--target T]

The loop is `lamina.Trainer` (`lamina.training`: which arguments are data, parameters and
state, the initializer, the schedules, the checkpoint contents); this module is its command
line: reading the files, the progress bar, the log and the files it writes.

- `--data DATA.npz`: one array per data argument, keyed by argument name, whose leading dim
  indexes batches: step i (from 0) uses batch i mod N. Every float argument it does not name is
  trained. `--init PARAMS.npz`: the trained arguments by name (each of them); without it the
  documented initializer draws them from `--seed`.
- `--log LOG.jsonl`: one JSON object per step, `{"step", "loss", "lr", "step_seconds"}`, written
  as the run goes (a resumed run keeps the lines up to its checkpoint's step and goes on).
- `--save FINAL.npz`: the final parameters by name, written when the run ends well.
- `--checkpoint DIR`: a checkpoint every `--checkpoint-every K` steps and at the end, each written
  atomically (`lamina.checkpoint`); `--resume DIR` continues from one to `--steps` in all.
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
from lamina.backends.registry import backend_names, get_backend
from lamina.cli.outputs import broken_pipe_exit, check_destination, save_npz_atomic
from lamina.ir.core.diagnostics import LaminaError, UsageError, report
from lamina.ir.text.source import load
from lamina.training import OPTIMIZERS, SCHEDULES, StepRecord, Trainer

PROG = "lamina-train"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # exit 1, one line, like every other error
        raise UsageError(self.prog, message)


def arg_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Train a Lamina forward function (a scalar loss).")
    p.add_argument("file", help="program (.mlir): a function returning a scalar loss first")
    p.add_argument("--version", action="version", version=f"{PROG} {lamina.__version__}")
    p.add_argument("--entry", default=None, help="the forward function (default: the only one)")
    p.add_argument("--data", required=True, metavar="DATA.npz",
                   help="one array per data argument; the leading dim indexes batches")
    p.add_argument("--init", default=None, metavar="PARAMS.npz",
                   help="initial values of the trained arguments, by name (default: the "
                        "initializer, from --seed)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initializer (default 0)")
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
    p.add_argument("--log", default=None, metavar="LOG.jsonl", help="one JSON line per step")
    p.add_argument("--save", default=None, metavar="FINAL.npz",
                   help="write the final parameters by name")
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
                   help="check memory-tier capacities against this target (name or .toml)")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Refuse a command line that could not be honoured, before any work."""
    for flag, value, least in (("--steps", args.steps, 0), ("--warmup", args.warmup, 0),
                               ("--checkpoint-every", args.checkpoint_every, 0),
                               ("--threads", args.threads, 1), ("--seed", args.seed, 0)):
        if value is not None and value < least:
            raise UsageError(PROG, f"argument {flag}: must be at least {least}, got {value}")
    for dest, value in vars(args).items():
        if value == "" and dest not in ("passes", "file"):
            raise UsageError(PROG, f"argument --{dest.replace('_', '-')}: expected a value, got ''")
    if args.checkpoint_every and args.checkpoint is None:
        raise UsageError(PROG, "--checkpoint-every needs --checkpoint DIR")
    if args.resume is not None and args.init is not None:
        raise UsageError(PROG, "--resume restores the parameters from its checkpoint; --init "
                         "applies to a fresh run")
    for path in (args.log, args.save):
        if path is not None:
            check_destination(path)
    if args.log is not None and args.save is not None and \
            os.path.realpath(args.log) == os.path.realpath(args.save):
        raise UsageError(PROG, "--log and --save both write the same file")
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
    except FileNotFoundError:
        raise LaminaError(f"{flag} '{path}': no such file") from None
    except IsADirectoryError:
        raise LaminaError(f"{flag} '{path}': is a directory") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise LaminaError(f"{flag} '{path}': {e}") from None


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
            self.bar.set_postfix(loss=f"{record.loss:.5g}", step_s=f"{record.step_seconds:.3g}",
                                 refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(argv: Sequence[str] | None = None) -> int:
    args = arg_parser().parse_args(argv)
    check_args(args)
    backend = get_backend(args.backend)
    module = load(args.file)
    data = read_npz(args.data, "--data")
    init = read_npz(args.init, "--init") if args.init is not None else None
    takes = set(backend.Options.__dataclass_fields__)
    options: dict[str, Any] = {k: v for k, v in (("threads", args.threads),)
                               if v is not None and k in takes}
    if args.target is not None:
        options["target"] = args.target
    trainer = Trainer(module, data, entry=args.entry, init=init, seed=args.seed,
                      pipeline=args.passes, backend=args.backend, steps=args.steps,
                      data_name=args.data, init_name=args.init or "--init",
                      optimizer=args.optimizer, lr=args.lr, weight_decay=args.weight_decay,
                      beta1=args.beta1, beta2=args.beta2, eps=args.eps, momentum=args.momentum,
                      lr_schedule=args.lr_schedule, warmup=args.warmup,
                      grad_clip=args.grad_clip, **options)
    if args.resume is not None:
        trainer.load_checkpoint(args.resume)
        was = trainer.checkpoint_steps
        if args.lr_schedule == "cosine" and was is not None and was != args.steps:
            print(f"{PROG}: note: the checkpoint's run had --steps {was}; the cosine schedule now "
                  f"decays over {args.steps} steps", file=sys.stderr)
        trainer.steps = args.steps
    log: IO[str] | None = None
    if args.log is not None:
        kept = _log_lines_upto(args.log, trainer.done) if args.resume is not None else []
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
    if last is not None:
        print(f"@{trainer.entry}: step {last.step}/{args.steps} loss {last.loss:.6g} lr "
              f"{last.lr:.6g}")
    else:
        print(f"@{trainer.entry}: {trainer.done} steps done already (--steps {args.steps})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = run(argv)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return broken_pipe_exit()
    except BaseException as e:  # noqa: BLE001 - every failure becomes one diagnostic
        if isinstance(e, SystemExit):
            return e.code if isinstance(e.code, int) else 0
        if os.environ.get("LAMINA_TRACEBACK") and not isinstance(e, LaminaError):
            raise
        return report(e)


if __name__ == "__main__":
    sys.exit(main())
