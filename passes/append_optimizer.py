"""`append-optimizer`: turn a gradient function into a training step that updates its parameters.

    -p 'derive-backward{data=x,y},append-optimizer{kind=adamw lr=1e-3 weight-decay=0.01}'

Input: a gradient function, as derive-backward makes it (`@NAME_grad`, returning the loss and the
gradient of each parameter, with `lamina.gradients` naming them: `passes/train_common.py`);
option `func` picks one, by default every such function of the module. Output: the same function,
renamed `@NAME_step` (a trailing `_grad` becomes `_step`), ending in the optimizer's update:

    sgd     w' = w - lr (g + weight_decay w)                          (torch.optim.SGD, no momentum)
    sgd with momentum=mu > 0                       (torch.optim.SGD, dampening 0, nesterov off)
            b' = mu b + (g + weight_decay w),   w' = w - lr b'
    adamw   w' = w (1 - lr weight_decay)                              (torch.optim.AdamW)
            m' = beta1 m + (1 - beta1) g,   v' = beta2 v + (1 - beta2) g^2
            w' = w' - lr / (1 - beta1^t) * m' / (sqrt(v') / sqrt(1 - beta2^t) + eps)

Signature: the gradient function's arguments, then for adamw the moments `%m_W`, `%v_W` of each
parameter W (typed as W: same shape, element type and mesh placement, so ZeRO-style sharded
parameters have sharded state), then for adamw with `bias-correction=true` (the default)
`%step: tensor<f32>`, the number of updates done before this one (PyTorch's `state['step']`,
starting at 0: this update uses t = step + 1 and returns it as the next `step`; a float counts
steps exactly up to 2^24). Results: each parameter's new value (placed like the parameter), then
for adamw each (m', v') pair and the next step, then the loss; the function attribute
`lamina.updates` records which argument each result replaces (`lamina.ir.buffers.updates`; -1 for the
loss), and each updated argument's `lamina.role` says what it holds (`parameter`,
`first_moment`, `second_moment`, `step_count`: the table `lamina.ir.buffers.updates.ROLES`), so nothing
downstream guesses either from names. `bias-correction=false` drops the
two corrections (the hand-written samples' update). `state-tier=host` (or nvme) keeps the moments
in that memory tier, ZeRO-Offload-style: they arrive and leave in it, and each is moved to HBM
right before its update (`lamina.move`), its new value back right after.

Options a training loop needs (the defaults leave the step as above):
- `lr-input=true`: the learning rate is an input of the step, `%lr: tensor<f32>` with role
  `learning_rate`, the last argument (no result replaces it), instead of a constant, so a loop
  feeds each step the rate of its schedule and the step is compiled once. It is used where the
  constant was: AdamW's decay factor `1 - lr weight_decay` and bias-corrected rate
  `lr / (1 - beta1^t)` are computed in the IR (f32, or f64 for f64 parameters), as PyTorch
  computes them in Python floats from its param group's lr.
- `momentum=mu` (kind=sgd): each parameter W gets a momentum buffer `%buf_W` (typed as W, role
  `momentum_buffer`, after the parameters' moments would be), returned as `new_buf_W`. PyTorch
  starts the buffer at the first gradient; a buffer of zeros gives that exactly (mu 0 + g = g).
- `grad-clip=c` (> 0): every gradient is scaled by min(1, c / (norm + 1e-6)) before the update,
  norm the global L2 norm over all gradients (torch.nn.utils.clip_grad_norm_), computed in the
  IR in f32 (f64 when every parameter is f64): the sum of each gradient's squares, then sqrt.

Scalars (lr, the betas, eps, the corrections) are rank-0 constants of the parameter's element type;
the step count and its powers are f32. The update ops are unplaced, so `propagate-sharding` places
them like any op (a replicated parameter's update is computed redundantly on every device).
With `--explain`: the rule and hyperparameters, each parameter's state, and which result
replaces which argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lamina.ir.buffers.memory import MoveOp, with_tier
from lamina.ir.buffers.updates import (
    GRADIENTS_ATTR,
    ROLE_ATTR,
    UPDATES_ATTR,
    set_roles,
    set_updates,
    updates_problem,
)
from lamina.ir.builder import Builder
from lamina.ir.core.diagnostics import LaminaError, error_at
from lamina.ir.core.shapes import info_of
from lamina.ir.ops.lamina import MinOp
from lamina.passes.explain import ExplainLog, LaminaPass
from lamina.passes.train_common import (
    arg_names,
    gradient_args,
    info_type,
    mesh_type_like,
    named_functions,
    returned_as,
)
from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, FunctionType, ModuleOp, StringAttr, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, SSAValue

PASS = "append-optimizer"


@dataclass
class _Param:
    """One parameter being updated: its argument, gradient and (adamw) moments."""

    name: str
    w: SSAValue
    g: SSAValue
    m: SSAValue | None = None
    v: SSAValue | None = None
    buf: SSAValue | None = None   # sgd's momentum buffer


class _Step:
    """Emits the update of one function, before its return."""

    def __init__(self, p: AppendOptimizer, func: FuncOp, ret: ReturnOp) -> None:
        self.p, self.func, self.ret = p, func, ret
        self.block: Block = func.body.block
        self.b = Builder.before_op(ret, func.location)
        self.adam = p.kind == "adamw"
        self.fixes: dict[str, tuple[SSAValue, SSAValue, SSAValue]] = {}
        self.lr: SSAValue | None = None   # the `%lr` argument with lr-input=true

    def rate(self, dtype: str) -> SSAValue:
        """The learning rate as a rank-0 value of `dtype`: the `%lr` input or the constant."""
        if self.lr is None:
            return self.b.scalar(self.p.lr, dtype)
        return self.b.cast(self.lr, dtype)

    def clip(self, params: list[_Param]) -> None:
        """Scale every gradient by min(1, c / (global norm + 1e-6)), as clip_grad_norm_ does."""
        b = self.b
        wide = "f64" if all(info_of(q.g).dtype == "f64" for q in params) else "f32"
        total: SSAValue | None = None
        for q in params:
            g = b.cast(q.g, wide)
            sq = b.reduce_sum(b.mul(g, g), list(range(len(info_of(g).shape))))
            total = sq if total is None else b.add(total, sq)
        assert total is not None
        norm = b.sqrt(total)
        norm.name_hint = "grad_norm"
        coef = b.op(MinOp, b.div(b.scalar(self.p.grad_clip, wide),
                                 b.add(norm, b.scalar(1e-6, wide))), b.scalar(1.0, wide))
        coef.name_hint = "clip_coef"
        for q in params:
            q.g = b.mul(q.g, b.cast(coef, info_of(q.g).dtype))

    def state_type(self, w: SSAValue) -> Attribute:
        """A moment's argument type: the parameter's, placed like it, in `state-tier`."""
        t = mesh_type_like(w, w.type) or TensorType(info_type(w).element_type,
                                                    info_type(w).get_shape())
        return with_tier(t, None if self.p.state_tier == "none" else self.p.state_tier)

    def to_compute(self, v: SSAValue) -> SSAValue:
        if self.p.state_tier == "none":
            return v
        move = MoveOp(v, "hbm")
        self.block.insert_op_before(move, self.ret)
        return move.results[0]

    def to_state(self, v: SSAValue, like: SSAValue) -> SSAValue:
        placed = returned_as(self.b, v, like.type)
        if self.p.state_tier == "none":
            return placed
        move = MoveOp(placed, self.p.state_tier)
        self.block.insert_op_before(move, self.ret)
        return move.results[0]

    def sgd(self, q: _Param) -> tuple[SSAValue, SSAValue | None]:
        """(w', the new momentum buffer or None) for one parameter."""
        b, p = self.b, self.p
        g = q.g
        if p.weight_decay:
            g = b.add(g, b.mul(q.w, b.like(p.weight_decay, q.w)))
        buf = None
        if q.buf is not None:
            g = buf = b.add(b.mul(self.to_compute(q.buf), b.like(p.momentum, q.w)), g)
        return b.sub(q.w, b.mul(g, self.rate(info_of(q.w).dtype))), buf

    def corrections(self, step: SSAValue, dtype: str) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(t = step + 1, lr / (1 - beta1^t), sqrt(1 - beta2^t)) for parameters of `dtype`, in
        f64 for f64 parameters and in f32 otherwise (PyTorch computes them in Python floats)."""
        wide = "f64" if dtype == "f64" else "f32"
        got = self.fixes.get(wide)
        if got is not None:
            return got
        b, p = self.b, self.p
        one = b.scalar(1.0, wide)
        t = b.add(b.cast(step, wide), one)
        size = b.div(self.rate(wide), b.sub(one, b.pow(b.scalar(p.beta1, wide), t)))
        root = b.sqrt(b.sub(one, b.pow(b.scalar(p.beta2, wide), t)))
        got = self.fixes[wide] = (t, size, root)
        return got

    def adamw(self, q: _Param, step: SSAValue | None) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(w', m', v') for one parameter."""
        b, p, w, g = self.b, self.p, q.w, q.g
        assert q.m is not None and q.v is not None
        fix = self.corrections(step, info_of(w).dtype) if step is not None else None
        m, v = self.to_compute(q.m), self.to_compute(q.v)
        m2 = b.add(b.mul(m, b.like(p.beta1, w)), b.mul(g, b.like(1.0 - p.beta1, w)))
        v2 = b.add(b.mul(v, b.like(p.beta2, w)), b.mul(b.mul(g, g), b.like(1.0 - p.beta2, w)))
        root = b.sqrt(v2)
        dtype = info_of(w).dtype
        if fix is not None:
            root = b.div(root, b.cast(fix[2], dtype))
        ratio = b.div(m2, b.add(root, b.like(p.eps, w)))
        rate = b.cast(fix[1], dtype) if fix is not None else self.rate(dtype)
        return b.sub(self.decayed(w), b.mul(ratio, rate)), m2, v2

    def decayed(self, w: SSAValue) -> SSAValue:
        """AdamW's decoupled decay w (1 - lr weight_decay): the factor a constant, or computed
        in the IR from the `%lr` input (in f64 for f64 parameters, else f32)."""
        b, p = self.b, self.p
        if not p.weight_decay:
            return w
        if self.lr is None:
            return b.mul(w, b.like(1.0 - p.lr * p.weight_decay, w))
        dtype = info_of(w).dtype
        wide = "f64" if dtype == "f64" else "f32"
        factor = b.sub(b.scalar(1.0, wide), b.mul(self.rate(wide), b.scalar(p.weight_decay, wide)))
        return b.mul(w, b.cast(factor, dtype))

    def run(self, params: list[_Param], step: SSAValue | None, log: ExplainLog | None
            ) -> list[SSAValue]:
        news: list[SSAValue] = []
        states: list[SSAValue] = []
        if self.p.grad_clip:
            self.clip(params)
        for q in params:
            if self.adam:
                w2, m2, v2 = self.adamw(q, step)
                states += [self.to_state(m2, q.w), self.to_state(v2, q.w)]
                for s, n in zip(states[-2:], ("m", "v"), strict=True):
                    s.name_hint = s.name_hint or f"new_{n}_{q.name}"
            else:
                w2, buf = self.sgd(q)
                if buf is not None:
                    buf = self.to_state(buf, q.w)
                    buf.name_hint = buf.name_hint or f"new_buf_{q.name}"
                    states.append(buf)
            w2 = returned_as(self.b, w2, q.w.type)
            w2.name_hint = w2.name_hint or f"new_{q.name}"
            news.append(w2)
            if log is not None:
                state = f"; moments %m_{q.name}, %v_{q.name} in tier {self.p.state_tier}" \
                    if self.adam and self.p.state_tier != "none" else ""
                if q.buf is not None:
                    state = f"; momentum {self.p.momentum} in %buf_{q.name}"
                log.add(self.func, f"%{q.name}: {self.p.kind} update from its gradient{state}")
        if step is None:
            return news + states
        nxt = self.b.add(step, self.b.scalar(1.0, "f32"))
        nxt.name_hint = "next_step"
        return [*news, *states, nxt]


def _append(func: FuncOp, p: AppendOptimizer, log: ExplainLog | None) -> None:
    grads = gradient_args(func)
    block = func.body.block
    ret = block.last_op
    if grads is None or not isinstance(ret, ReturnOp) or len(ret.operands) != len(grads) + 1:
        raise error_at(func, f"{PASS}: @{func.sym_name.data} is not a gradient function (run "
                       "derive-backward first: it returns the loss and the gradients, and "
                       f"records them in {GRADIENTS_ATTR})")
    names = arg_names(func)
    params = [_Param(names[i], block.args[i], g) for i, g in zip(grads, ret.operands[1:],
                                                                 strict=True)]
    step = _Step(p, func, ret)
    if step.adam:
        for q in params:
            q.m = block.insert_arg(step.state_type(q.w), len(block.args))
            q.m.name_hint = f"m_{q.name}"
            q.v = block.insert_arg(step.state_type(q.w), len(block.args))
            q.v.name_hint = f"v_{q.name}"
    elif p.momentum:
        for q in params:
            q.buf = block.insert_arg(step.state_type(q.w), len(block.args))
            q.buf.name_hint = f"buf_{q.name}"
    count = None
    if step.adam and p.bias_correction:
        count = block.insert_arg(TensorType(Float32Type(), []), len(block.args))
        count.name_hint = "step"
    if p.lr_input:
        step.lr = block.insert_arg(TensorType(Float32Type(), []), len(block.args))
        step.lr.name_hint = "lr"
    loss = ret.operands[0]
    results = [*step.run(params, count, log), loss]
    # which argument each result replaces, in result order (`lamina.ir.buffers.updates`): the parameters,
    # then each parameter's (m, v), then the step count; the loss replaces none
    replaced: list[SSAValue | None] = [q.w for q in params]
    if step.adam:
        replaced += [s for q in params for s in (q.m, q.v)]
    elif p.momentum:
        replaced += [q.buf for q in params]
    if count is not None:
        replaced.append(count)
    assert len(replaced) == len(results) - 1
    ret.detach()
    ret.erase()
    block.add_op(ReturnOp(*results))
    func.function_type = FunctionType.from_lists([a.type for a in block.args],
                                                 [v.type for v in results])
    del func.attributes[GRADIENTS_ATTR]
    position: dict[SSAValue, int] = {a: i for i, a in enumerate(block.args)}
    updates = {r: position[a] for r, a in enumerate(replaced) if a is not None}
    set_updates(func, updates)
    roles = _roles(params, count, step.lr)
    set_roles(func, {position[a]: role for a, role in roles.items()})
    old = func.sym_name.data
    func.sym_name = StringAttr((old[:-len("_grad")] if old.endswith("_grad") else old) + "_step")
    problem = updates_problem(func)
    if problem is not None:  # a result not typed like its argument: a bug of this pass
        raise error_at(func, f"{PASS}: internal error: {problem}")
    if log is not None:
        hyper = f"lr={'%lr (an input)' if p.lr_input else p.lr}, weight-decay={p.weight_decay}"
        if p.momentum:
            hyper += f", momentum={p.momentum}"
        if p.grad_clip:
            hyper += f", grad-clip={p.grad_clip} (global norm)"
        if step.adam:
            hyper += f", beta1={p.beta1}, beta2={p.beta2}, eps={p.eps}, bias-correction=" \
                     f"{str(p.bias_correction).lower()}"
        log.add(func, f"@{old} -> @{func.sym_name.data}: {p.kind} ({hyper}) on "
                f"{len(params)} parameter(s)")
        names = arg_names(func)
        pairs = ", ".join(f"#{r} -> %{names[a]}" for r, a in sorted(updates.items()))
        log.add(func, f"@{func.sym_name.data}: {UPDATES_ATTR} (result -> the argument it "
                f"replaces): {pairs}; #{len(results) - 1} (the loss) replaces none")
        held = ", ".join(f"%{a.name_hint} {role}" for a, role in roles.items())
        log.add(func, f"@{func.sym_name.data}: {ROLE_ATTR} (what an argument holds): {held}")


def _roles(params: list[_Param], count: SSAValue | None, lr: SSAValue | None
           ) -> dict[SSAValue, str]:
    """The role (`lamina.ir.buffers.updates.ROLES`) of each argument the step updates, and of the
    learning rate input."""
    roles: dict[SSAValue, str] = {}
    for q in params:
        roles[q.w] = "parameter"
        if q.m is not None and q.v is not None:
            roles[q.m], roles[q.v] = "first_moment", "second_moment"
        if q.buf is not None:
            roles[q.buf] = "momentum_buffer"
    if count is not None:
        roles[count] = "step_count"
    if lr is not None:
        roles[lr] = "learning_rate"
    return roles


@dataclass(frozen=True)
class AppendOptimizer(LaminaPass):
    """Append an SGD or AdamW update to gradient functions (see the module docstring)."""

    name: ClassVar[str] = PASS
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"kind": ("sgd", "adamw"),
                                                     "state_tier": ("none", "host", "nvme")}
    func: str = ""
    kind: str = "adamw"
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    bias_correction: bool = True
    state_tier: str = "none"
    lr_input: bool = False
    momentum: float = 0.0
    grad_clip: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for option, value, ok, want in (
                ("lr", self.lr, self.lr >= 0, ">= 0"),
                ("beta1", self.beta1, 0 <= self.beta1 < 1, "in [0, 1)"),
                ("beta2", self.beta2, 0 <= self.beta2 < 1, "in [0, 1)"),
                ("eps", self.eps, self.eps >= 0, ">= 0"),
                ("weight-decay", self.weight_decay, self.weight_decay >= 0, ">= 0"),
                ("momentum", self.momentum, self.momentum >= 0, ">= 0"),
                ("grad-clip", self.grad_clip, self.grad_clip >= 0, ">= 0 (0: no clipping)")):
            if not ok:
                raise LaminaError(f"option '{option}' for {PASS} must be {want}, got {value}")
        if self.momentum and self.kind != "sgd":
            raise LaminaError(f"option 'momentum' for {PASS} applies to kind=sgd (adamw keeps "
                              f"moments of its own), got momentum={self.momentum} with "
                              f"kind={self.kind}")

    def run(self, ctx: Context, module: ModuleOp, log: ExplainLog | None) -> None:
        funcs = [op for op in module.ops if isinstance(op, FuncOp)]
        if self.func:
            chosen = named_functions(funcs, self.func, PASS)
        else:
            chosen = [f for f in funcs if gradient_args(f) is not None]
            if not chosen:
                raise error_at(None, f"{PASS}: the module has no gradient function (run "
                               "derive-backward first)")
        taken = {f.sym_name.data for f in funcs}
        for f in chosen:
            old = f.sym_name.data
            new = (old[:-len("_grad")] if old.endswith("_grad") else old) + "_step"
            if new in taken:
                raise error_at(f, f"{PASS}: @{new} already exists")
            _append(f, self, log)
            taken.add(new)
