"""Training checkpoints: a folder holding the state arrays (`.npz`) and what they are (`.json`).

    DIR/checkpoint.json          {"format": "lamina-train-checkpoint", "version": 1, "step": 10,
                                  "state": "state-00000010-3f2a9c1e.npz", "sha256": "...", ...}
    DIR/state-00000010-3f2a9c1e.npz   every argument the step updates, by argument name

Why two files and this order: a checkpoint must survive a crash (or a signal) in the middle of
writing the next one. Each file is written completely under a temporary name in DIR, flushed to
disk and renamed into place with `os.replace`, which is atomic: the new state file first (under a
name of its own: the step and the first digits of its SHA-256, so the previous one is untouched
even when a second run writes the same step into the same folder), then `checkpoint.json`, whose
rename is the moment the new checkpoint takes over. Interrupted before that rename, DIR still holds
the previous `checkpoint.json` and the state file it names; only after it are older state files
removed, with any `.lamina-*` temporaries a killed writer left behind. The JSON records the state
file's SHA-256, so a state file damaged later is one diagnostic ("corrupt checkpoint"), never a
silently different run. Nothing is ever pickled: arrays are read with
`np.load(allow_pickle=False)`, the metadata with `json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
from lamina.ir.core.diagnostics import LaminaError

FORMAT = "lamina-train-checkpoint"
VERSION = 1
META = "checkpoint.json"
OWN_KEYS = ("format", "version", "step", "state", "sha256")


def _fsync_dir(path: str) -> None:
    """Make a rename in `path` durable (where the OS lets a folder be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(folder: str, name: str, data: bytes) -> None:
    """`folder/name` holds `data` whole, or keeps what it held: a temporary file, then rename."""
    fd, tmp = tempfile.mkstemp(prefix=".lamina-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(folder, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for key, a in arrays.items():
            with z.open(key + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def write_checkpoint(folder: str, step: int, arrays: Mapping[str, np.ndarray],
                     meta: Mapping[str, Any]) -> None:
    """Write the checkpoint of `step` into `folder` (created if missing), atomically (module
    docstring): `arrays` by argument name, `meta` (JSON values) beside the format's own keys."""
    clash = sorted(set(meta) & set(OWN_KEYS))
    if clash:
        raise LaminaError(f"checkpoint metadata may not set {', '.join(clash)}: the format's own "
                          "keys")
    try:
        os.makedirs(folder, exist_ok=True)
        data = _npz_bytes(arrays)
        digest = hashlib.sha256(data).hexdigest()
        state = f"state-{step:08d}-{digest[:8]}.npz"
        _write_atomic(folder, state, data)
        own = {"format": FORMAT, "version": VERSION, "step": step, "state": state,
               "sha256": digest}
        record = {**own, **meta}
        _write_atomic(folder, META, (json.dumps(record, indent=2) + "\n").encode())
        for old in os.listdir(folder):
            stale_state = old.startswith("state-") and old.endswith(".npz") and old != state
            if stale_state or old.startswith(".lamina-"):
                os.unlink(os.path.join(folder, old))
    except OSError as e:
        raise LaminaError(f"cannot write checkpoint '{folder}': {e.strerror or e}") from None


def read_checkpoint(folder: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metadata, arrays by name) of the checkpoint in `folder`; anything missing, damaged or of
    another format is one LaminaError naming the checkpoint."""
    def bad(why: str) -> LaminaError:
        return LaminaError(f"cannot resume from '{folder}': {why}")

    path = os.path.join(folder, META)
    if not os.path.isdir(folder):
        raise bad("no such folder" if not os.path.exists(folder) else "not a folder")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise bad(f"no {META} (not a checkpoint folder)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"corrupt checkpoint: {META} does not parse ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise bad(f"{META} is not a {FORMAT}")
    if meta.get("version") != VERSION:
        raise bad(f"checkpoint version {meta.get('version')!r}, this Lamina reads {VERSION}")
    state, digest, step = meta.get("state"), meta.get("sha256"), meta.get("step")
    if not isinstance(state, str) or os.path.basename(state) != state or \
            not isinstance(digest, str) or not isinstance(step, int) or step < 0:
        raise bad(f"corrupt checkpoint: {META} lacks a valid 'state', 'sha256' or 'step'")
    try:
        with open(os.path.join(folder, state), "rb") as f:
            data = f.read()
    except OSError as e:
        raise bad(f"corrupt checkpoint: its state file {state}: {e.strerror or e}") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise bad(f"corrupt checkpoint: {state} does not match the SHA-256 in {META}")
    import io

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: np.array(z[k], order="C") for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise bad(f"corrupt checkpoint: {state}: {e}") from None
    return meta, arrays
