"""The ONNX importer: the GPT-2 of `gpt2_model` exported by torch to ONNX, and refusals.

The model is exported with `torch.onnx.export(dynamo=True)` (offline), saved with its weights in
an external `MODEL.onnx.data` file as torch writes them, imported from the file and run; both
outputs equal onnxruntime's. Small hand-built models check the refusals: an unmapped op, a
symbolic dimension, control flow, an element type Lamina lacks, an attribute no converter reads,
a corrupt file, a missing external-data file; each is one diagnostic naming the file, the node
(index, name, op type) and what is missing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Literal

import lamina
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from gpt2_model import GPT2Config, example_inputs, make_gpt2
from lamina.frontends.common import ImportRefused
from lamina.frontends.onnx import StaticInputNeeded, import_model
from lamina.frontends.onnx.ops import folded_only, mapped
from onnx import TensorProto, helper

BIN = Path(sys.executable).parent
CFG = GPT2Config()


@pytest.fixture(scope="module")
def gpt2_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("onnx") / "gpt2.onnx"
    model = make_gpt2(CFG).eval()
    program = torch.onnx.export(model, example_inputs(CFG), dynamo=True,
                                input_names=["idx", "targets"], verbose=False)
    assert program is not None
    program.save(str(path), external_data=True)
    assert (path.parent / "gpt2.onnx.data").exists()
    return path


def test_gpt2_from_torch_onnx_equals_onnxruntime(gpt2_onnx: Path) -> None:
    module, weights = import_model(str(gpt2_onnx))
    again = lamina.parse(lamina.to_text(module))
    idx, targets = (t.numpy() for t in example_inputs(CFG))
    got = lamina.run(again, {"idx": idx, "targets": targets, **weights}).outputs
    session = ort.InferenceSession(str(gpt2_onnx), providers=["CPUExecutionProvider"])
    want = session.run(None, {"idx": idx, "targets": targets})
    assert len(got) == len(want) == 2
    for g, w in zip(got.values(), want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-5)
    lamina.apply(again, "cse,fuse-elementwise,annotate-lifetimes")   # an ordinary program
    assert "lamina.fused" in lamina.to_text(again)
    fused = lamina.run(again, {"idx": idx, "targets": targets, **weights}).outputs
    for g, w in zip(fused.values(), want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-5)


def test_cli_writes_program_and_weights(gpt2_onnx: Path, tmp_path: Path) -> None:
    out, w = tmp_path / "g.mlir", tmp_path / "g.npz"
    r = subprocess.run([str(BIN / "lamina-import"), "onnx", str(gpt2_onnx), "-o", str(out),
                        "--weights", str(w)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    module = lamina.load(str(out))
    weights = dict(np.load(w))
    idx, targets = (t.numpy() for t in example_inputs(CFG))
    got = lamina.run(module, {"idx": idx, "targets": targets, **weights}).outputs
    assert np.isfinite(got["out1"]) and got["out0"].shape == (2, 8, CFG.vocab)


# ---- hand-built models ---------------------------------------------------------------------

def _model(nodes, inputs, outputs, inits=(), opset: int = 20):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _refused(model) -> ImportRefused:
    with pytest.raises(ImportRefused) as e:
        import_model(model, name="m.onnx")
    assert str(e.value).startswith("m.onnx: error: ") or str(e.value).startswith("m.onnx:")
    return e.value


def test_unmapped_op_names_the_node() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["r"], name="first"),
                helper.make_node("Tan", ["r"], ["y"], name="the_tan")], [_vi("x", [2])],
               [_vi("y", [2])])
    e = _refused(m)
    assert e.kind == "unsupported op" and "node 1 'the_tan' (Tan)" in str(e)


def test_symbolic_dimension_is_a_dynamic_shape() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["batch", 4])],
               [_vi("y", ["batch", 4])])
    e = _refused(m)
    assert e.kind == "dynamic shape" and "'batch'" in str(e)


def test_control_flow_is_refused() -> None:
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "b", [],
                               [_vi("o", [2])])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
               [_vi("c", [], TensorProto.BOOL), _vi("x", [2])], [_vi("y", [2])])
    e = _refused(m)
    assert e.kind == "control flow" and "(If)" in str(e)


def test_element_type_and_attribute_refusals() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2], TensorProto.UINT8)],
               [_vi("y", [2], TensorProto.UINT8)])
    assert _refused(m).kind == "unsupported dtype"
    m = _model([helper.make_node("Relu", ["x"], ["y"], frobnicate=3)], [_vi("x", [2])],
               [_vi("y", [2])])
    e = _refused(m)
    assert e.kind == "unsupported attribute" and "'frobnicate'" in str(e)
    m = _model([helper.make_node("Dropout", ["x", "r", "t"], ["y"])],
               [_vi("x", [4])], [_vi("y", [4])],
               [helper.make_tensor("r", TensorProto.FLOAT, [], [0.5]),
                helper.make_tensor("t", TensorProto.BOOL, [], [True])])
    e = _refused(m)
    assert e.kind == "unsupported attribute" and "training_mode" in str(e)


def test_shape_inputs_at_run_time_are_dynamic_unless_bound() -> None:
    m = _model([helper.make_node("Reshape", ["x", "s"], ["y"])],
               [_vi("x", [2, 3]), _vi("s", [2], TensorProto.INT64)], [_vi("y", [3, 2])])
    with pytest.raises(StaticInputNeeded) as e:
        import_model(m, name="m.onnx")
    assert e.value.static_input == "s" and e.value.kind == "dynamic shape"
    module, _ = import_model(m, static_inputs={"s": np.array([3, 2])})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = lamina.run(module, {"x": x}).outputs["out0"]
    np.testing.assert_array_equal(out, x.reshape(3, 2))


def test_initializers_are_weights_or_small_constants() -> None:
    big = np.arange(100, dtype=np.float32).reshape(10, 10)
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                helper.make_node("Add", ["h", "b"], ["y"])],
               [_vi("x", [2, 10])], [_vi("y", [2, 10])],
               [onnx.numpy_helper.from_array(big, "w"),
                onnx.numpy_helper.from_array(np.ones(10, np.float32), "b")])
    module, weights = import_model(m)
    assert list(weights) == ["w"] and "lamina.constant" in lamina.to_text(module)
    x = np.ones((2, 10), np.float32)
    out = lamina.run(module, {"x": x, **weights}).outputs["out0"]
    np.testing.assert_allclose(out, x @ big + 1)


def test_corrupt_and_missing_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf" * 3)
    with pytest.raises(ImportRefused, match="not an ONNX model") as e:
        import_model(str(bad))
    assert e.value.kind == "bad input"
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [64, 64])], [_vi("y", [64, 64])])
    onnx.save(m, str(tmp_path / "ok.onnx"))
    module, _ = import_model(str(tmp_path / "ok.onnx"))
    # a model whose weights live in an external file that is gone
    w = onnx.numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    m2 = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [64, 64])],
                [_vi("y", [64, 64])], [w])
    onnx.save(m2, str(tmp_path / "ext.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    (tmp_path / "ext.onnx.data").unlink()
    with pytest.raises(ImportRefused, match="external data") as e:
        import_model(str(tmp_path / "ext.onnx"))
    r = subprocess.run([str(BIN / "lamina-import"), "onnx", str(bad), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "bad.onnx: error: not an ONNX model" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_fold_only_ops_fold_on_known_integers_and_are_refused_at_run_time() -> None:
    """Mod has no row: on a shape it is folded, on a run-time tensor it is one refusal."""
    folded = _model([helper.make_node("Shape", ["x"], ["s"]),
                     helper.make_node("Mod", ["s", "k"], ["m"]),
                     helper.make_node("Mul", ["m", "three"], ["t"]),
                     helper.make_node("Expand", ["x", "t"], ["y"])],
                    [_vi("x", [1, 6])], [_vi("y", [3, 6])],
                    [onnx.numpy_helper.from_array(np.array([5, 4], np.int64), "k"),
                     onnx.numpy_helper.from_array(np.array([3, 3], np.int64), "three")])
    module, _ = import_model(folded)
    assert "Mod" in folded_only() and "Mod" not in mapped()
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    out = lamina.run(module, {"x": x}).outputs["out0"]
    np.testing.assert_array_equal(out, np.broadcast_to(x, (3, 6)))   # ([1, 6] % [5, 4]) * 3
    at_run_time = _model([helper.make_node("Mod", ["i", "j"], ["y"])],
                         [_vi("i", [3], TensorProto.INT64), _vi("j", [3], TensorProto.INT64)],
                         [_vi("y", [3], TensorProto.INT64)])
    e = _refused(at_run_time)
    assert e.kind == "unsupported op" and "node 0 (Mod)" in str(e) and "run time" in str(e)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad_modes_equal_numpy(mode: Literal["constant", "edge", "reflect", "wrap"]) -> None:
    """Every Pad mode, with a constant value computed at run time (as Attention's function body
    does), against numpy.pad."""
    nodes = [helper.make_node("Neg", ["v"], ["nv"]),
             helper.make_node("Pad", ["x", "p", "nv"] if mode == "constant" else ["x", "p"], ["y"],
                              mode=mode)]
    pads = np.array([1, 2, 2, 1], np.int64)           # before (dim 0, dim 1), after (dim 0, dim 1)
    m = _model(nodes, [_vi("x", [3, 4]), _vi("v", [])], [_vi("y", [6, 7])],
               [onnx.numpy_helper.from_array(pads, "p")])
    module, _ = import_model(m)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = lamina.run(module, {"x": x, "v": np.array(2.5, np.float32)}).outputs["out0"]
    width = [(1, 2), (2, 1)]
    want = np.pad(x, width, mode=mode, constant_values=-2.5) if mode == "constant" \
        else np.pad(x, width, mode=mode)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("opset", "integer", "value"), [
    (21, False, -1.5), (10, False, 2.0), (21, True, -100), (21, False, None)],
    ids=["input", "attribute", "int64", "default"])
def test_constant_pad_with_a_known_fill_is_the_pad_row(opset: int, integer: bool,
                                                       value: float | None) -> None:
    """A known fill (attribute before opset 11, constant input after, absent: 0) is one `pad`
    row after the crop of the negative pads, against numpy."""
    pads = [1, -1, 0, 2]                  # before (dim 0, dim 1), after (dim 0, dim 1)
    elem = TensorProto.INT64 if integer else TensorProto.FLOAT
    dtype = np.int64 if integer else np.float32
    if opset < 11:
        node = helper.make_node("Pad", ["x"], ["y"], pads=pads, value=value)
        inits = []
    else:
        node = helper.make_node("Pad", ["x", "p"] + (["v"] if value is not None else []), ["y"])
        inits = [onnx.numpy_helper.from_array(np.array(pads, np.int64), "p")]
        if value is not None:
            inits.append(onnx.numpy_helper.from_array(np.array(value, dtype), "v"))
    m = _model([node], [_vi("x", [3, 4], elem)], [_vi("y", [4, 5], elem)], inits, opset=opset)
    module, _ = import_model(m)
    assert "lamina.pad" in lamina.to_text(module) and "lamina.concat" not in lamina.to_text(module)
    x = np.arange(12).reshape(3, 4).astype(dtype)
    got = lamina.run(module, {"x": x}).outputs["out0"]
    want = np.pad(x[:, 1:], [(1, 0), (0, 2)], constant_values=value or 0)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_the_readme_lists_every_mapped_op() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("- **onnx**"):readme.index("- **Refusals**")]
    listed = set(re.findall(r"[A-Za-z][A-Za-z0-9]*", section))
    assert set(mapped()) <= listed, sorted(set(mapped()) - listed)


def test_group_normalization_of_opset_18_scales_per_group() -> None:
    """Opset 18's scale and bias have one entry per group (21's per channel; the node suite
    has only the newer form)."""
    m = _model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2,
                                 epsilon=1e-3)],
               [_vi("x", [3, 4, 5]), _vi("s", [2]), _vi("b", [2])], [_vi("y", [3, 4, 5])],
               opset=18)
    module, _ = import_model(m)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    s, b = np.array([2.0, -0.5], np.float32), np.array([0.25, 1.0], np.float32)
    got = lamina.run(module, {"x": x, "s": s, "b": b}).outputs["out0"]
    g = x.astype(np.float64).reshape(3, 2, 10)
    norm = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-3)
    want = (norm * s[:, None] + b[:, None]).reshape(3, 4, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
