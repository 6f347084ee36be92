"""Patch convolutions (ViT's patch embedding) through both importers, and the refused rest.

torch: `nn.Conv2d(3, 8, kernel_size=4, stride=4)` with and without bias, on an input whose sides
are multiples of the kernel and on one whose remainder torch drops, exported plainly (conv2d)
and after `run_decompositions()` (convolution), against eager torch; `derive-backward` of a sum
through it against autograd for the weight and the bias. ONNX: Conv nodes against onnx's
reference evaluator. A convolution that is not a patch convolution is refused naming what is not
modeled.
"""

from __future__ import annotations

from typing import Any

import lamina
import numpy as np
import onnx
import pytest
import torch
from lamina.backends.interface import find_entry
from lamina.frontends.common import ImportRefused
from lamina.frontends.onnx import import_model
from lamina.frontends.torch import import_exported
from lamina.ir.ops.lamina import MatmulOp
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

SHAPES = [(2, 3, 16, 16), (2, 3, 18, 17), (3, 16, 16)]    # exact, remainder, unbatched


class Loss(torch.nn.Module):
    """A scalar of the convolution's output that weighs every element differently."""

    def __init__(self, conv: torch.nn.Conv2d) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return (y * y.sin()).sum()


def _conv(bias: bool) -> torch.nn.Conv2d:
    torch.manual_seed(0)
    return torch.nn.Conv2d(3, 8, kernel_size=4, stride=4, bias=bias).eval()


@pytest.mark.parametrize("decompose", [False, True], ids=["conv2d", "convolution"])
@pytest.mark.parametrize("shape", SHAPES, ids=["16x16", "18x17", "unbatched"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_patch_conv_equals_torch(bias: bool, shape: tuple[int, ...], decompose: bool) -> None:
    m = _conv(bias)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    ep = torch.export.export(m, (x,))
    ep = ep.run_decompositions() if decompose else ep
    module, weights = import_exported(ep)
    assert any(isinstance(op, MatmulOp) for op in module.walk())
    got = lamina.run(lamina.parse(lamina.to_text(module)), [x.numpy(), *weights.values()]
                     ).outputs["out0"]
    want = m(x).detach().numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", SHAPES[:2], ids=["16x16", "18x17"])
def test_patch_conv_gradients_equal_autograd(shape: tuple[int, ...]) -> None:
    model = Loss(_conv(True))
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    module, weights = import_exported(torch.export.export(model, (x,)))
    forward = find_entry(module, None).sym_name.data
    lamina.apply(module, "derive-backward{data=x loss=0}")
    grad_fn = find_entry(module, f"{forward}_grad")
    got = list(lamina.run(module, {"x": x.numpy(), **weights},
                          entry=grad_fn.sym_name.data).outputs.values())
    loss = model(x)
    loss.backward()
    names = [a.name_hint or "" for a in grad_fn.body.block.args if a.name_hint != "x"]
    assert names == ["conv.weight", "conv.bias"] and len(got) == 3
    np.testing.assert_allclose(got[0], loss.item(), rtol=1e-5)
    params = dict(model.named_parameters())
    for name, g in zip(names, got[1:], strict=True):
        grad = params[name].grad
        assert grad is not None
        want = grad.numpy()
        err = float(np.abs(g - want).max()) / float(np.abs(want).max())
        assert err < 1e-5, f"{name}: {err:.3g}"


@pytest.mark.parametrize(("conv", "x_shape", "named"), [
    (torch.nn.Conv2d(3, 8, 3, stride=1, padding=1), (2, 3, 16, 16),
     "conv2d with stride (1, 1), padding (1, 1) and kernel (3, 3)"),
    (torch.nn.Conv2d(3, 8, 4, stride=2), (2, 3, 16, 16), "stride (2, 2) and kernel (4, 4)"),
    (torch.nn.Conv2d(4, 8, 2, stride=2, groups=2), (2, 4, 16, 16), "groups 2 and kernel (2, 2)"),
    (torch.nn.Conv2d(3, 8, 2, stride=2, dilation=2), (2, 3, 16, 16),
     "conv2d with dilation (2, 2) and kernel (2, 2)"),
    (torch.nn.Conv1d(3, 8, 4, stride=4), (2, 3, 16), "a 1-D convolution"),
    (torch.nn.ConvTranspose2d(3, 8, 4, stride=4), (2, 3, 16, 16), "a transposed convolution"),
], ids=["padded", "overlapping", "grouped", "dilated", "1-d", "transposed"])
def test_other_convolutions_are_refused(conv: torch.nn.Module, x_shape: tuple[int, ...],
                                        named: str) -> None:
    ep = torch.export.export(conv.eval(), (torch.randn(*x_shape),)).run_decompositions()
    with pytest.raises(ImportRefused) as e:
        import_exported(ep)
    assert e.value.kind == "unsupported attribute" and "aten.convolution.default" in str(e.value)
    assert named in str(e.value), str(e.value)
    if "transposed" not in named and "1-D" not in named:
        assert "only non-overlapping patch convolutions" in str(e.value)


# ---- ONNX Conv ---------------------------------------------------------------------------------

def _onnx_conv(x_shape: tuple[int, ...], w: np.ndarray, b: np.ndarray | None,
               attrs: dict[str, Any]) -> onnx.ModelProto:
    inputs = ["x", "w"] + (["b"] if b is not None else [])
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")]
                                                 if b is not None else [])
    node = helper.make_node("Conv", inputs, ["y"])
    node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(x_shape))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize(("x_shape", "bias", "attrs"), [
    ((2, 3, 16, 16), True, {"kernel_shape": [4, 4], "strides": [4, 4]}),
    ((2, 3, 18, 17), False, {"strides": [4, 4], "pads": [0, 0, 0, 0], "dilations": [1, 1]}),
    ((1, 3, 8, 8), True, {"strides": [4, 4], "auto_pad": "SAME_UPPER", "group": 1}),
    ((1, 3, 9, 8), True, {"strides": [4, 4], "auto_pad": "VALID"}),
], ids=["kernel-shape", "remainder", "same-exact", "valid"])
def test_onnx_patch_conv_equals_the_reference(x_shape: tuple[int, ...], bias: bool,
                                              attrs: dict[str, Any]) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 4, 4)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32) if bias else None
    model = _onnx_conv(x_shape, w, b, attrs)
    x = rng.standard_normal(x_shape).astype(np.float32)
    module, weights = import_model(model)
    got = lamina.run(module, {"x": x, **weights}).outputs["out0"]
    outs = ReferenceEvaluator(model).run(["y"], {"x": x})
    assert isinstance(outs, list)
    want = np.asarray(outs[0])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "named"), [
    ((1, 3, 8, 8), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]},
     "strides (1, 1), pads (1, 1, 1, 1) and kernel_shape (3, 3)"),
    ((1, 4, 8, 8), (8, 2, 2, 2), {"strides": [2, 2], "group": 2}, "group 2 and kernel_shape"),
    ((1, 3, 9, 8), (8, 3, 4, 4), {"strides": [4, 4], "auto_pad": "SAME_LOWER"}, "auto_pad"),
    ((1, 3, 8), (8, 3, 4), {"strides": [4]}, "a 1-D convolution"),
], ids=["padded", "grouped", "same-padding", "1-d"])
def test_onnx_other_convolutions_are_refused(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                                             attrs: dict[str, Any], named: str) -> None:
    model = _onnx_conv(x_shape, np.zeros(w_shape, np.float32), None, attrs)
    with pytest.raises(ImportRefused) as e:
        import_model(model, name="m.onnx")
    assert e.value.kind == "unsupported attribute" and "(Conv)" in str(e.value)
    assert named in str(e.value), str(e.value)
