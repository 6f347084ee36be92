"""How every Lamina tool ends: an exit status, and any failure as one diagnostic, never a
traceback.

`guarded(run, argv)` calls a tool's `run(argv)` and turns what can escape it into the status a
command-line tool gives: `--help` / `--version` (argparse's SystemExit) their own, Ctrl-C 130, a
reader of stdout that went away (`lamina-run ... | head`) the quiet SIGPIPE status, and any other
exception one `file:line:col: error: message` on stderr with status 1. `LAMINA_TRACEBACK=1`
re-raises errors that are not Lamina's own diagnostics, for debugging Lamina itself. Stdout is
flushed inside the guard, so a broken pipe is found here and not at interpreter exit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from lamina.cli.outputs import broken_pipe_exit
from lamina.ir.core.diagnostics import LaminaError, report


def guarded(run: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None) -> int:
    """The exit status of `run(argv)`, every failure reported as one diagnostic."""
    try:
        code = run(argv)
        sys.stdout.flush()   # a reader that went away is found here, not at interpreter exit
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
