"""The torch importer on a whole GPT-2 with its loss: exported, imported, run, equal to torch.

The small GPT-2 of `gpt2_model` (2 pre-LN blocks, causal attention, tanh-GeLU MLP, tied LM head,
cross-entropy over next tokens) in eval mode is exported with torch.export, imported before and
after `run_decompositions()`, and run by the interpreter on the same inputs and weights: logits
and loss equal torch's within float32 tolerance; then the same after fuse-elementwise and
annotate-lifetimes, and after propagate-sharding and insert-collectives with a data x model mesh
written on the inputs (`lamina-run --check`, which also compares with the unplaced program), and
through the other passes (cse, canonicalize, dce, fusion, lifetimes, memory tiers on a target too
small for it). Train mode keeps one `lamina.dropout` per dropout with distinct seeds. Refusals (an
unmapped ATen op, a dynamic shape, control flow, a dtype) are one diagnostic naming the node and
its target, at the model's source line. Each family of mapped ATen ops equals eager torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import lamina
import numpy as np
import pytest
import torch
from gpt2_model import GPT2Config, example_inputs, make_gpt2
from lamina.backends.interface import find_entry
from lamina.frontends.common import ImportRefused
from lamina.frontends.torch import import_exported
from lamina.frontends.torch.aten import mapped
from lamina.ir.mesh.collectives import with_spec
from lamina.ir.mesh.placement import MeshOp
from lamina.ir.mesh.sharding import Spec
from lamina.ir.ops.lamina import DropoutOp, GatherOp, IotaOp, LogSoftmaxOp
from xdsl.dialects.builtin import FunctionType, ModuleOp

BIN = Path(sys.executable).parent
TESTS = Path(__file__).parent
CFG = GPT2Config()
# float32 tolerance for the logits (|x| ~ 5) and the loss, after 2 blocks of reordered sums
RTOL, ATOL = 1e-5, 1e-5


@pytest.fixture(scope="module")
def model():
    return make_gpt2(CFG).eval()


@pytest.fixture(scope="module")
def inputs():
    return example_inputs(CFG)


@pytest.fixture(scope="module")
def exported(model, inputs):
    return torch.export.export(model, inputs)


@pytest.fixture(scope="module")
def reference(model, inputs):
    with torch.no_grad():
        logits, loss = model(*inputs)
    return logits.numpy(), loss.numpy()


def _feeds(inputs, weights) -> dict[str, np.ndarray]:
    idx, targets = inputs
    return {"idx": idx.numpy(), "targets": targets.numpy(), **weights}


def _check(outputs: dict[str, np.ndarray], reference) -> None:
    np.testing.assert_allclose(outputs["out0"], reference[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(outputs["out1"], reference[1], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "core-aten"])
def test_gpt2_equals_torch(exported, inputs, reference, decompose: bool) -> None:
    ep = exported.run_decompositions() if decompose else exported
    module, weights = import_exported(ep)
    text = lamina.to_text(module)
    again = lamina.parse(text)                      # an ordinary program: prints and re-parses
    assert "lm_head.weight" in weights and "wte.weight" not in weights   # tied: one argument
    ops = {type(op) for op in again.walk()}
    assert {GatherOp, IotaOp, LogSoftmaxOp} <= ops and DropoutOp not in ops   # eval: no dropout
    _check(lamina.run(again, _feeds(inputs, weights)).outputs, reference)


def test_gpt2_after_fusion_and_lifetimes(exported, inputs, reference) -> None:
    module, weights = import_exported(exported)
    lamina.apply(module, "fuse-elementwise,annotate-lifetimes")
    assert "lamina.fused" in lamina.to_text(module)
    _check(lamina.run(module, _feeds(inputs, weights)).outputs, reference)


# a data x model mesh: tokens split by batch on data; Megatron's column / row splits on model
PLACEMENTS = {
    "idx": ((("data",), ()),), "targets": ((("data",), ()),),
    "lm_head.weight": (((), ("model",)),),           # embedding dim split (tied with the head)
    "attn.weight": ((("model",), ()),), "fc.weight": ((("model",), ()),),
    "proj.weight": (((), ("model",)),), "fc_proj.weight": (((), ("model",)),),
}


def _place(module: ModuleOp) -> None:
    func = find_entry(module, None)
    block = func.body.block
    for arg in block.args:
        name = arg.name_hint or ""
        key = next((k for k in PLACEMENTS if name == k or name.endswith("." + k)), None)
        if key is not None:
            arg._type = with_spec(arg.type, "m", Spec(PLACEMENTS[key][0]))  # noqa: SLF001
    func.properties["function_type"] = FunctionType.from_lists(
        [a.type for a in block.args], list(func.function_type.outputs.data))
    module.body.block.insert_op_before(MeshOp("m", [("data", 2), ("model", 2)]), func)


def test_gpt2_on_a_data_x_model_mesh(exported, inputs, reference, tmp_path: Path) -> None:
    module, weights = import_exported(exported)
    _place(module)
    lamina.verify(module)
    prog = tmp_path / "gpt2_placed.mlir"
    prog.write_text(lamina.to_text(module))
    np.savez(tmp_path / "in.npz", allow_pickle=False, **_feeds(inputs, weights))
    r = subprocess.run([str(BIN / "lamina-run"), str(prog), "--inputs", str(tmp_path / "in.npz"),
                        "-p", "propagate-sharding,insert-collectives{target=h100-node}",
                        "--check", "--outputs", str(tmp_path / "out.npz"), "--stats-json",
                        str(tmp_path / "stats.json")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("check out") == 2 and "FAILED" not in r.stdout
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["devices"] == 4 and stats["collectives"], "placed on 4 devices, communicating"
    _check(dict(np.load(tmp_path / "out.npz")), reference)


EVERY_PASS = ("cse,canonicalize,dce,fuse-elementwise,annotate-lifetimes,"
              "assign-memory-tiers{{target={t}}}")


def test_gpt2_through_every_other_pass(exported, inputs, reference, tmp_path: Path) -> None:
    """The passes the mesh test does not run, in one pipeline, on a target whose HBM is too small
    for the model (so weights and activations are offloaded and prefetched): equal to torch."""
    tiny = resources.files("lamina.ir.mesh.targets").joinpath("tiny.toml").read_text("utf-8")
    target = tmp_path / "smaller.toml"
    target.write_text(tiny.replace("capacity = 1048576", "capacity = 65536")    # HBM 64 KiB
                      .replace('name = "tiny"', 'name = "smaller"'))
    module, weights = import_exported(exported)
    prog = tmp_path / "gpt2.mlir"
    prog.write_text(lamina.to_text(module))
    np.savez(tmp_path / "in.npz", allow_pickle=False, **_feeds(inputs, weights))
    pipeline = EVERY_PASS.format(t=target)
    r = subprocess.run([str(BIN / "lamina-run"), str(prog), "--inputs", str(tmp_path / "in.npz"),
                        "-p", pipeline, "--target", str(target), "--check", "--outputs",
                        str(tmp_path / "out.npz")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("check out") == 2 and "FAILED" not in r.stdout
    _check(dict(np.load(tmp_path / "out.npz")), reference)
    lamina.apply(module, pipeline)
    text = lamina.to_text(module)
    assert "lamina.fused" in text and "lamina.free" in text and "lamina.move" in text


def test_train_mode_keeps_seeded_dropout(inputs) -> None:
    model = make_gpt2(CFG).train()
    ep = torch.export.export(model, inputs)
    module, weights = import_exported(ep, seed=7)
    drops = [op for op in module.walk() if isinstance(op, DropoutOp)]
    n_torch = sum(1 for n in ep.graph.nodes if "dropout" in str(n.target))
    assert len(drops) == n_torch == 1 + 3 * CFG.layers
    attrs = [op.attr_values() for op in drops]
    assert {a["rate"] for a in attrs} == {CFG.dropout}
    assert [a["seed"] for a in attrs] == list(range(7, 7 + len(drops)))
    # Lamina's masks, not torch's: the same program runs to the same result, and differs from
    # the eval-mode one (dropout is applied)
    first = lamina.run(module, _feeds(inputs, weights)).outputs
    second = lamina.run(module, _feeds(inputs, weights)).outputs
    np.testing.assert_array_equal(first["out0"], second["out0"])
    eval_logits = model.eval()(*inputs)[0].detach().numpy()
    assert np.abs(first["out0"] - eval_logits).max() > 1e-3


def test_decomposed_train_mode_uses_native_dropout(inputs) -> None:
    ep = torch.export.export(make_gpt2(CFG).train(), inputs).run_decompositions()
    assert any("native_dropout" in str(n.target) for n in ep.graph.nodes)
    module, _ = import_exported(ep)
    assert sum(isinstance(op, DropoutOp) for op in module.walk()) == 1 + 3 * CFG.layers


class Buffered(torch.nn.Module):
    """A parameter, a persistent and a non-persistent buffer, and a lifted constant."""

    scale: torch.Tensor
    shift: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))
        self.register_buffer("scale", torch.full((3,), 2.0))
        self.register_buffer("shift", torch.arange(3.0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.w) * self.scale + self.shift + torch.tensor([1.0, 2.0, 3.0])


def test_parameters_and_buffers_become_named_arguments() -> None:
    m = Buffered()
    x = torch.randn(2, 4)
    module, weights = import_exported(torch.export.export(m, (x,)))
    func = find_entry(module, None)
    assert [a.name_hint for a in func.body.block.args] == ["x", "w", "scale", "shift"]
    assert set(weights) == {"w", "scale", "shift"}
    got = lamina.run(module, {"x": x.numpy(), **weights}).outputs["out0"]
    np.testing.assert_allclose(got, m(x).detach().numpy(), rtol=1e-6, atol=1e-6)


def _refusal(m: torch.nn.Module, args: tuple, **kw) -> ImportRefused:
    ep = torch.export.export(m, args, **kw)
    with pytest.raises(ImportRefused) as e:
        import_exported(ep)
    return e.value


class Cumprod(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=0) + 1.0


class Branch(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda y: y + 1.0, lambda y: y - 1.0, (x,))


class IntMath(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x ** 2


class Bytes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() * 2.0


def test_refusals_name_the_node_and_what_is_missing() -> None:
    x = torch.randn(4, 3)
    e = _refusal(Cumprod(), (x,))
    assert e.kind == "unsupported op" and "node 'cumprod' (aten.cumprod.default)" in str(e)
    assert "test_frontend_torch.py:" in str(e).split(":", 1)[0] + ":" + str(e).split(":")[1]
    e = _refusal(Branch(), (x,))
    assert e.kind == "control flow" and "cond" in str(e)
    e = _refusal(IntMath(), (torch.ones(3, dtype=torch.int64),))
    assert e.kind == "unsupported dtype" and "aten.pow.Tensor_Scalar" in str(e) \
        and "float element type" in str(e)
    e = _refusal(Bytes(), (torch.ones(3, dtype=torch.uint8),))
    assert e.kind == "unsupported dtype" and "torch.uint8" in str(e)
    dim = torch.export.Dim("n", min=2, max=64)
    e = _refusal(Cumprod(), (x,), dynamic_shapes={"x": {0: dim}})
    assert e.kind == "dynamic shape" and "symbolic size" in str(e)


def test_every_target_the_gpt2_graphs_use_is_mapped(exported) -> None:
    used = {str(n.target) for ep in (exported, exported.run_decompositions())
            for n in ep.graph.nodes if n.op == "call_function"}
    used.discard("<built-in function getitem>")
    assert used <= set(mapped()), sorted(used - set(mapped()))


# ---- the command line ----------------------------------------------------------------------

def _lamina_import(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "lamina-import"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def test_cli_imports_a_factory(tmp_path: Path, inputs, reference) -> None:
    r = _lamina_import("torch", "samples.gpt2_model:make_gpt2", "--args", "2x8xi64,2x8xi64", "-o",
                       str(tmp_path / "g.mlir"), "--weights", str(tmp_path / "w.npz"), cwd=TESTS.parent)
    assert r.returncode == 0, r.stderr
    module = lamina.load(str(tmp_path / "g.mlir"))
    weights = dict(np.load(tmp_path / "w.npz"))
    _check(lamina.run(module, _feeds(inputs, weights)).outputs, reference)


@pytest.mark.parametrize(("args", "message"), [
    (["torch", "no_such_module:f", "--args", "2xf32"], "cannot import module 'no_such_module'"),
    (["torch", "gpt2_model:nothing", "--args", "2xf32"], "has no attribute 'nothing'"),
    (["torch", "gpt2_model:GPT2Config", "--args", "2xf32"], "not a torch.nn.Module"),
    (["torch", "builtins:int", "--args", "2xf32"], "builtins:int() returned an int, not a "
     "torch.nn.Module"),
    (["torch", "samples.gpt2_model:make_gpt2", "--args", "2x8xu8"], "is not SHAPExDTYPE"),
])
def test_cli_bad_factories_are_one_diagnostic(tmp_path: Path, args: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """In process (torch is loaded already): exit 1, one line, no file written."""
    from lamina.cli.importer import main

    monkeypatch.chdir(TESTS.parent)
    out = tmp_path / "never.mlir"
    assert main([*args, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()



CUMPROD_MODEL = """import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) + torch.cumprod(x, 0)


def make():
    return Model()
"""


def test_cli_refusal_points_at_the_model_source(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An unmapped op: `file:line:col: error:` at the call in the model's code, that line and a
    caret under the op's name; exit 1, nothing written."""
    from lamina.cli.importer import main

    (tmp_path / "cumprod_model.py").write_text(CUMPROD_MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "never.mlir"
    assert main(["torch", "cumprod_model:make", "--args", "4xf32", "-o", str(out)]) == 1
    err = capsys.readouterr().err.rstrip("\n").splitlines()
    assert len(err) == 3, err
    assert err[0].startswith(f"{tmp_path / 'cumprod_model.py'}:6:38: error: node 'cumprod' "
                             "(aten.cumprod.default): has no Lamina mapping"), err[0]
    assert err[1] == "        return torch.tanh(x) + torch.cumprod(x, 0)"
    assert err[2] == " " * 37 + "^"
    assert not out.exists()

# ---- the ATen table, op by op against eager torch ------------------------------------------

class Zoo(torch.nn.Module):
    """One module per family of mapped ATen ops; each returns a tuple of tensors."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor):
        return self.fn(*xs)


F = torch.nn.functional


def _attention(q, k, v, m):
    return (F.scaled_dot_product_attention(q, k, v, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=m),
            F.scaled_dot_product_attention(q, k, v, attn_mask=m.float() * -2.0, scale=0.3))


ZOO = {
    "elementwise": (lambda x, y: (x + 2 * y, x - y, torch.sub(x, y, alpha=0.5), 1 - x, x * y,
                                  x / (y.abs() + 1), (x.abs() + 0.5) ** y, 2.0 ** x, -x,
                                  torch.exp(x), torch.log(x.abs() + 1), torch.tanh(x),
                                  torch.sigmoid(x), torch.relu(x), torch.erf(x),
                                  torch.sqrt(x.abs()), torch.rsqrt(x.abs() + 1),
                                  torch.reciprocal(y.abs() + 1), F.silu(x), F.gelu(x),
                                  x.clamp(-0.5, 0.5), x.clamp(min=0.1), torch.maximum(x, y),
                                  torch.minimum(x, y), torch.sin(x), torch.cos(3 * y),
                                  torch.min(x, y), torch.max(x, y)),
                    ((3, 4), (3, 4))),
    "compare": (lambda x, y: (x == y, x != 0, x < y, x <= 0.5, x > y, x >= y,
                              torch.where(x > 0, x, y), torch.where(x > 0, x, 0.0),
                              x.masked_fill(y > 0, -1.0), ~(x > y), (x > 0) & (y > 0),
                              (x > 0) | (y > 0), (x > 0) ^ (y > 0), torch.logical_not(x > 0)),
                ((3, 4), (1, 4))),
    "reduce": (lambda x: (x.sum(), x.sum(dim=1), x.sum(dim=(0, 2), keepdim=True), x.mean(-1),
                          x.amax(dim=1), x.amin(dim=0), x.max(), x.min(), (x > 0).sum(dim=1),
                          F.softmax(x, 1), F.log_softmax(x, -1), x.float().mean()),
               ((2, 3, 5),)),
    "nn": (lambda x, w, b: (F.linear(x, w, b), F.linear(x[0], w), x @ w.t(),
                            torch.bmm(x, w.t().expand(2, 5, 6)), torch.addmm(b, x[0], w.t()),
                            torch.baddbmm(b, x, w.t().expand(2, 5, 6), beta=0.5, alpha=2.0),
                            F.layer_norm(x, (5,), None, None, 1e-3), F.rms_norm(x, (5,), None, 1e-6),
                            torch.matmul(x[0, 0], w.t()), torch.matmul(w, x[0, 0])),
           ((2, 4, 5), (6, 5), (6,))),
    "layout": (lambda x: (x.view(6, 4), x.reshape(-1), x.permute(2, 0, 1), x.transpose(0, 2),
                          x[0].t(), x.unsqueeze(1), x[:, :1].squeeze(1), x.flatten(1),
                          x.expand(3, 2, 3, 4), x[:, 1:, ::2], x.select(1, -1),
                          *x.split(1, dim=1), *x.chunk(2, dim=2), *x.unbind(0),
                          torch.cat([x, x * 2], dim=1), torch.stack([x, -x], dim=1),
                          x.to(torch.float64), x.contiguous(), x.clone()),
               ((2, 3, 4),)),
    "factories": (lambda x: (torch.zeros_like(x), torch.ones(2, 3), torch.full((3,), 1.5),
                             torch.arange(5), torch.arange(2, 11, 3), torch.arange(4.0),
                             x.new_zeros(2), x.new_ones(3) + x[0, :3]),
                  ((4, 4),)),
    # after run_decompositions, tril is integer arithmetic on aranges
    "triangles": (lambda x: (torch.tril(x), torch.triu(x, 1), torch.tril(torch.ones(4, 4), -1)),
                  ((4, 4),)),
    "attention": (_attention, ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8), (4, 6))),
    "integers": (lambda i, j: (i + j, i - 2 * j, i * j, torch.maximum(i, j), torch.minimum(i, j),
                               torch.min(i, j), torch.max(i, 3 * j), -i, i.abs(),
                               (i > j).any(), (i > 0).all(dim=1), (i < 5).any(0, keepdim=True),
                               i / 2, torch.cumsum(i, 1), torch.cumsum(i > 0, dim=0),
                               torch.cumsum(i.to(torch.int32), -1, dtype=torch.int32),
                               torch.where(i > j, i, j), torch.min(i, 2 * j) == torch.max(j, i),
                               torch.gather(i, 1, j.abs().clamp(max=3)[:, :3]),
                               torch.gather(j, 1, i.abs().clamp(max=3)[:2, :2]),
                               torch.gather(i, 0, j.abs().clamp(max=2)[:1])),
                 ((3, 4), (3, 4))),
    "scans": (lambda x, y: (torch.cumsum(x, 0), torch.cumsum(x * y, dim=-1), x.cumsum(1).sin(),
                            torch.gather(x, 1, torch.tensor([[2, 0, 0], [1, 3, 2], [0, 0, 0]])),
                            torch.gather(x, 0, torch.tensor([[2, 0, 1, 1]]))),
              ((3, 4), (3, 4))),
    "pads": (lambda x, y: (F.pad(x, (1, 2)), F.pad(x, (0, 0, 2, 1), value=-1.5),
                           F.pad(x, (-1, 2, 1, -2), value=3.0), torch.constant_pad_nd(y, [0, 1]),
                           F.pad(x[None], (1, 1, 0, 0, 1, 0)),
                           F.pad((y > 0).long().cumsum(-1), (0, 1), value=-100)),
             ((3, 4), (3, 4))),
}


def _zoo_inputs(shapes, seed: int = 0, ints: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, s in enumerate(shapes):
        if ints:
            out.append(torch.randint(-9, 10, s, generator=g))
        elif s == (4, 6):          # the attention mask, one row with every key masked
            m = torch.rand(s, generator=g) > 0.4
            m[:, 0] = True
            m[2] = False
            out.append(m)
        else:
            out.append(torch.randn(s, generator=g) + 0.1 * i)
    return tuple(out)


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "core-aten"])
@pytest.mark.parametrize("family", sorted(ZOO))
def test_each_family_of_aten_ops_equals_eager(family: str, decompose: bool) -> None:
    fn, shapes = ZOO[family]
    xs = _zoo_inputs(shapes, ints=family == "integers")
    ep = torch.export.export(Zoo(fn), xs)
    if decompose:
        ep = ep.run_decompositions()
    module, weights = import_exported(ep)
    got = lamina.run(lamina.parse(lamina.to_text(module)),
                     [*(x.numpy() for x in xs), *weights.values()]).outputs
    want = fn(*xs)
    assert len(got) == len(want)
    for k, w in enumerate(want):
        g = got[f"out{k}"]
        w = w.numpy()
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6, err_msg=f"output {k}")


def test_lookups_and_losses_equal_eager() -> None:
    def fn(w, i, t, x):
        logp = F.log_softmax(x, dim=1)
        return (F.embedding(i, w), w.index_select(0, i[0]), w[i[0]],
                torch.gather(x, 1, t[:, None]), F.cross_entropy(x, t), F.nll_loss(logp, t),
                F.cross_entropy(x, t, reduction="sum"), F.cross_entropy(x, t, reduction="none"),
                F.cross_entropy(x, torch.where(t > 2, t, -100)))
    g = torch.Generator().manual_seed(3)
    xs = (torch.randn(7, 3, generator=g), torch.randint(0, 7, (2, 4), generator=g),
          torch.randint(0, 5, (6,), generator=g), torch.randn(6, 5, generator=g))
    for decompose in (False, True):
        ep = torch.export.export(Zoo(fn), xs)
        ep = ep.run_decompositions() if decompose else ep
        module, weights = import_exported(ep)
        got = lamina.run(module, [x.numpy() for x in xs]).outputs
        for k, w in enumerate(fn(*xs)):
            np.testing.assert_allclose(got[f"out{k}"], w.numpy(), rtol=2e-6, atol=2e-6,
                                       err_msg=f"output {k} (decompose={decompose})")


def test_cli_stderr_carries_no_third_party_noise(tmp_path: Path) -> None:
    """torch's own deprecation warnings (pytree's LeafSpec, raised by run_decompositions) and
    torchvision's notes are not Lamina's to print: a successful import says nothing on stderr."""
    r = _lamina_import("torch", "samples.gpt2_model:make_gpt2", "--args", "2x8xi64,2x8xi64",
                       "--decompose", "--train", "-o", str(tmp_path / "g.mlir"), "--weights",
                       str(tmp_path / "w.npz"), cwd=TESTS.parent)
    assert r.returncode == 0, r.stderr
    noise = [line for line in r.stderr.splitlines()
             if "Warning" in line or line.startswith("[Gloo]") or "torchvision" in line]
    assert noise == [], r.stderr
    assert r.stderr == "", r.stderr


# ---- what is not math: device moves, in-place ops, no-grad regions, the coverage summary -----

INDEXING = (lambda x, i, j: (x[i, j], x[:, i, j], x[i, :, j], x[i[:1], j], x[-1 - i, j],
                             x[i[:, None], i[None, :]], x[..., i, j[0]], x[i, i, j]),
            ((4, 5, 6), (2, 3), (2, 3)))


def test_advanced_indexing_with_several_index_tensors_equals_eager() -> None:
    """NumPy's rule: the index tensors broadcast to one grid, in the indexed dims' place when
    they are adjacent, else first; negative indices count from the end."""
    fn, (xs, i_shape, _) = INDEXING
    g = torch.Generator().manual_seed(5)
    args = (torch.randn(xs, generator=g), torch.randint(0, 4, i_shape, generator=g),
            torch.randint(-5, 5, i_shape, generator=g))
    for decompose in (False, True):
        ep = torch.export.export(Zoo(fn), args)
        module, _ = import_exported(ep.run_decompositions() if decompose else ep)
        got = lamina.run(module, [a.numpy() for a in args]).outputs
        for k, w in enumerate(fn(*args)):
            np.testing.assert_array_equal(got[f"out{k}"], w.numpy(), err_msg=f"output {k}")


class InPlace(torch.nn.Module):
    """In-place updates of fresh tensors (T5's position buckets are written this way)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x.clone()
        a.add_(y)
        b = (x * 2).mul_(y).sub_(1.0)
        c = torch.zeros_like(x)
        c += a * b
        return a, b, c, a + c


def test_in_place_ops_are_functionalized() -> None:
    args = (torch.randn(3, 4), torch.randn(3, 4))
    ep = torch.export.export(InPlace(), args)
    targets = {str(n.target) for n in ep.graph.nodes}
    assert {"aten.add_.Tensor", "aten.mul_.Tensor"} <= targets   # the graph keeps them
    module, _ = import_exported(ep)
    got = lamina.run(module, [a.numpy() for a in args]).outputs
    for k, w in enumerate(InPlace()(*args)):
        np.testing.assert_allclose(got[f"out{k}"], w.numpy(), rtol=1e-6, err_msg=f"output {k}")


class WriteThroughView(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x.clone()
        z[0].add_(1.0)
        return z


class WriteUnderView(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x.clone()
        v = z.view(-1)
        z.mul_(2.0)
        return v + 1.0


@pytest.mark.parametrize("module", [WriteThroughView(), WriteUnderView()],
                         ids=["through-a-view", "into-a-viewed-tensor"])
def test_in_place_writes_that_alias_are_refused(module: torch.nn.Module) -> None:
    e = _refusal(module, (torch.randn(3, 4),))
    assert e.kind == "unsupported op" and "shares storage with another value" in str(e)


class Rotary(torch.nn.Module):
    """HF's rotary tables: computed under `torch.no_grad()`, on a device move."""

    def __init__(self) -> None:
        super().__init__()
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 8, 2) / 8.0))

    @torch.no_grad()
    def tables(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = pos[:, None].float() * self.inv_freq.to(pos.device)[None, :]
        return f.cos(), f.sin()

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = self.tables(pos)
        return x * cos.to(x.device) + x.tanh() * sin


def test_no_grad_regions_are_inlined_and_device_moves_are_no_ops() -> None:
    args = (torch.randn(5, 4), torch.arange(5))
    ep = torch.export.export(Rotary().eval(), args)
    targets = {str(n.target) for n in ep.graph.nodes}
    assert "wrap_with_set_grad_enabled" in targets
    module, weights = import_exported(ep)
    got = lamina.run(module, [*(a.numpy() for a in args), *weights.values()]).outputs
    np.testing.assert_allclose(got["out0"], Rotary()(*args).numpy(), rtol=1e-6, atol=1e-6)


class Gaps(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.cumprod(x, 0)
        b = torch.cumprod(a, 1)
        return torch.atan2(a, b) + torch.logcumsumexp(b, 0)


def test_a_refusal_summarizes_every_unmapped_op() -> None:
    """Every unmapped ATen op is named with its count in the one error, and each gets a note at
    its first source line, so the whole gap shows at once."""
    e = _refusal(Gaps(), (torch.randn(3, 4),))
    assert e.kind == "unsupported op"
    assert "node 'cumprod' (aten.cumprod.default): has no Lamina mapping" in e.message
    assert "in all, 3 ATen ops (4 nodes) have none: aten.cumprod.default (2), " \
        "aten.atan2.default (1), aten.logcumsumexp.default (1)" in e.message
    lines = {n.message.split(":")[0]: n.loc for n in e.notes}
    assert list(lines) == ["aten.cumprod.default", "aten.atan2.default",
                           "aten.logcumsumexp.default"]
    here = Path(__file__).name
    assert all(loc is not None and Path(loc.file).name == here for loc in lines.values())
    first = lines["aten.cumprod.default"]
    assert first is not None and first.line == Gaps.forward.__code__.co_firstlineno + 1
    assert "aten.cumprod.default: 2 nodes, the first 'cumprod' here" in str(e)
