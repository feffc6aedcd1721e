"""asim.from_torch against PyTorch's own outputs: real module code, every strategy, the SIMT model, Numba.

The modules are in ``tests/torch_models.py`` (HF LLaMA/BERT/T5/ViT code, diffusers' GroupNorm+SiLU,
torchvision's BatchNorm+ReLU, optimizer updates written out, autocast-style casts, indexing).  Each is
exported (torch.export + the project's decompositions), imported, and checked three ways against what
PyTorch computes in eager mode: the numpy reference, every strategy's plan on the SIMT model, and (a
sample) the Numba backend in the CUDA simulator.

Tolerances, ``|got - want| <= rtol * |want| + atol * max|want|``: float32 rtol 1e-5, atol 1e-6 (numpy and
PyTorch order sums and round transcendental functions differently: a few ulps per op); bf16 1.6e-2 and
f16 2e-3 (one or two ulps of the format: PyTorch rounds a low-precision op once from float32, the
reference rounds each op's result, and rounding of ties differs by an ulp), for every float output of a graph
that computes in that precision anywhere (a float32 layer norm of a bf16 product inherits its error);
integers and bools exact.

Without torch installed the whole file is skipped (torch is an optional dependency; CI installs it
through the ``test`` extra).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_models import (  # noqa: E402 (after importorskip)
    CASES,
    BertSelfOutput,
    BnRelu,
    LlamaRMSNorm,
    LogSoftmaxNLL,
    adamw_step,
)

import astitch_sim as asim  # noqa: E402 (after importorskip)

TOL = {"f32": (1e-5, 1e-6), "f64": (1e-12, 1e-12), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}
SIZE = 8


def _numpy(t):
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def pytorch_outputs(module, args, kwargs):
    with torch.no_grad():
        out = module(*args, **kwargs)
    return [_numpy(t) for t in torch.utils._pytree.tree_leaves(out)]


def assert_close(got, want, dtype, where, precision="f32"):
    assert got.shape == want.shape, f"{where}: shape {got.shape} vs PyTorch's {want.shape}"
    if dtype in TOL:
        rtol, atol = TOL[precision if TOL[precision] > TOL[dtype] else dtype]
        w = want.astype(np.float64)
        finite = np.isfinite(w)
        scale = max(1.0, float(np.max(np.abs(w[finite]))) if finite.any() else 1.0)
        np.testing.assert_allclose(got.astype(np.float64), w, rtol=rtol, atol=atol * scale, equal_nan=True,
                                   err_msg=where)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=where)


def check(g, outs, want, where):
    assert len(outs) == len(want) == len(g.outputs), where
    kinds = {n.dtype for n in g}
    precision = "bf16" if "bf16" in kinds else "f16" if "f16" in kinds else "f32"
    for node, got, w in zip(g.outputs, outs, want, strict=True):
        assert_close(np.asarray(got), w, node.dtype, f"{where} output {node.name}", precision)


def imported(name, size=SIZE):
    module, args, kwargs = CASES[name](size)
    g = asim.from_torch(module, *args, **kwargs)
    return g, asim.torch_inputs(module, *args, **kwargs), pytorch_outputs(module, args, kwargs)


# -- every fixture: reference and every strategy on the SIMT model match PyTorch -----------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_module_imports_and_every_strategy_matches_pytorch(name):
    g, inputs, want = imported(name)
    assert [p.name for p in g.inputs] and len(inputs) == len(g.inputs)
    for p, x in zip(g.inputs, inputs, strict=True):
        assert tuple(p.shape) == x.shape, p.name
    check(g, asim.reference(g, inputs), want, f"{name} reference")
    for strategy in asim.STRATEGIES:
        plan = asim.compile(g, strategy, "H100")
        res = asim.simulate(plan, inputs)
        check(g, res.outputs, want, f"{name} {strategy}")
        assert res.stats.kernel_launches == len(plan.kernels)


def test_every_fixture_family_is_there():
    assert {"llama_rmsnorm", "bert_self_output", "masked_softmax", "bias_gelu", "bias_gelu_tanh", "swiglu",
            "groupnorm_silu", "cross_entropy_label_smoothing", "batchnorm_relu", "llama_rotary", "log_softmax_nll",
            "adamw_step", "adam_step", "lion_step", "causal_attention", "hf_attention_padding_mask", "t5_layernorm",
            "vit_patch_glue", "autocast_bf16", "autocast_f16", "llama_rmsnorm_bf16"} <= set(CASES)


# -- what the import looks like -------------------------------------------------------------------------

def test_parameters_are_state_dict_entries_then_buffers_then_arguments():
    m = BertSelfOutput(SIZE).eval()
    g = asim.from_torch(m, torch.randn(2, 3, SIZE), input_tensor=torch.randn(2, 3, SIZE))
    assert [p.name for p in g.inputs] == ["dense.weight", "dense.bias", "LayerNorm.weight", "LayerNorm.bias",
                                          "hidden_states", "input_tensor"]
    bn = BnRelu(4).eval()
    g = asim.from_torch(bn, torch.randn(2, 4, 3, 3))
    assert [(p.name, p.dtype) for p in g.inputs] == [("bn.weight", "f32"), ("bn.bias", "f32"),
                                                     ("bn.running_mean", "f32"), ("bn.running_var", "f32"),
                                                     ("bn.num_batches_tracked", "s64"), ("x", "f32")]
    ins = asim.torch_inputs(bn, torch.randn(2, 4, 3, 3))
    np.testing.assert_array_equal(ins[2], bn.bn.running_mean.numpy())
    assert ins[4].dtype == np.int64


def test_a_function_is_named_after_its_arguments_and_its_outputs_flatten():
    args = [torch.randn(3, 4) for _ in range(3)] + [torch.randn(3, 4).abs(), torch.tensor(2.0)]
    g = asim.from_torch(adamw_step, *args)
    assert g.name == "adamw_step"
    assert [p.name for p in g.inputs] == ["param", "grad", "exp_avg", "exp_avg_sq", "step"]
    assert [o.shape for o in g.outputs] == [(3, 4)] * 3

    def nested(x, pair):
        return {"a": x * 2, "b": (pair[0] + pair[1], [x.sum(0)])}

    x, pair = torch.randn(2, 3), (torch.randn(2, 3), torch.randn(2, 3))
    g = asim.from_torch(nested, x, pair)
    assert [p.name for p in g.inputs] == ["x", "pair_0", "pair_1"]
    check(g, asim.reference(g, asim.torch_inputs(nested, x, pair)), pytorch_outputs(nested, (x, pair), {}), "nested")


def test_keyword_arguments_are_inputs_in_the_order_of_the_call():
    m = BertSelfOutput(SIZE).eval()
    a, b = torch.randn(2, 3, SIZE), torch.randn(2, 3, SIZE)
    g = asim.from_torch(m, input_tensor=b, hidden_states=a)
    assert [p.name for p in g.inputs[-2:]] == ["input_tensor", "hidden_states"]
    ins = asim.torch_inputs(m, input_tensor=b, hidden_states=a)
    np.testing.assert_array_equal(ins[-2], b.numpy())
    np.testing.assert_array_equal(ins[-1], a.numpy())
    check(g, asim.reference(g, ins), pytorch_outputs(m, (a, b), {}), "kwargs")


def test_normalisations_arrive_as_stitchable_ops_and_matmuls_as_library_kernels():
    """softmax, layer norm, group norm, GELU: elementwise, broadcast and reduce ops only; every matmul
    (linear, bmm, @) a ``dot``, planned as a library kernel in every strategy."""
    allowed = {"parameter", "constant", "iota", "broadcast", "reshape", "transpose", "slice", "concatenate",
               "reduce", "convert", "compare", "select", "dot"}
    for name, dots in (("bert_self_output", 1), ("groupnorm_silu", 0), ("causal_attention", 4),
                       ("hf_attention_padding_mask", 5), ("bias_gelu", 0), ("masked_softmax", 0)):
        g, _, _ = imported(name)
        ops = {n.op for n in g.live_nodes()}
        assert {n.kind for n in g.live_nodes()} <= {"source", "elementwise", "broadcast", "layout", "reduce",
                                                     "library"}, name
        assert ops - {o for o in ops if asim.OPS[o].kind == "elementwise"} <= allowed, (name, ops)
        assert sum(n.op == "dot" for n in g.live_nodes()) == dots, name
        for strategy in asim.STRATEGIES:
            plan = asim.compile(g, strategy, "H100")
            assert sorted(plan.graph[n].op for k in plan.library for n in k.outputs) == ["dot"] * dots, name
    g, _, _ = imported("bert_self_output")
    launches = {s: len(asim.compile(g, s, "H100").kernels) for s in asim.STRATEGIES}
    assert launches["astitch"] < launches["unfused"], launches


def test_int64_indices_and_every_indexed_op():
    g, _, _ = imported("embedding_and_indexing")
    ops = {n.op for n in g.live_nodes()}
    assert {"gather", "scatter", "topk", "reduce-window", "select"} <= ops
    assert g["ids"].dtype == "s64" and any(n.op == "gather" and n.operands[1].dtype == "s64" for n in g)


def test_promotion_follows_pytorch():
    def mixed(i, f16, b):
        return i * 2.5, f16 * 3, f16 + torch.tensor(2.0, dtype=torch.float64), i + b, i / 2, f16 * i, b & (i > 0)

    args = (torch.arange(6).reshape(2, 3), torch.randn(2, 3).half(), torch.tensor([True, False, True]))
    g = asim.from_torch(mixed, *args)
    assert [o.dtype for o in g.outputs] == ["f32", "f16", "f16", "s64", "f32", "f16", "pred"]
    check(g, asim.reference(g, asim.torch_inputs(mixed, *args)), pytorch_outputs(mixed, args, {}), "promotion")


# -- the Numba backend (CUDA simulator), a sample ---------------------------------------------------------

@pytest.mark.parametrize("name,strategy", [("bert_self_output", "astitch"), ("masked_softmax", "xla"),
                                           ("llama_rmsnorm_bf16", "astitch"), ("embedding_and_indexing", "astitch"),
                                           ("groupnorm_silu", "astitch")])     # stages over a view of the input
def test_numba_backend_matches_pytorch(name, strategy):
    gpu_backend = pytest.importorskip("gpu_backend")
    g, inputs, want = imported(name, 4)
    check(g, gpu_backend.run(asim.compile(g, strategy, "H100"), inputs), want, f"{name} numba {strategy}")


# -- real sizes -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_log_softmax_nll_over_32000_classes():
    m, logits, labels = LogSoftmaxNLL(), torch.randn(8, 32000), torch.randint(0, 32000, (8,))
    g = asim.from_torch(m, logits, labels)
    inputs, want = asim.torch_inputs(m, logits, labels), pytorch_outputs(m, (logits, labels), {})
    for strategy in asim.STRATEGIES:
        check(g, asim.simulate(asim.compile(g, strategy, "H100"), inputs).outputs, want, f"nll {strategy}")


@pytest.mark.slow
def test_llama_rmsnorm_at_a_real_width():
    m = LlamaRMSNorm(4096).eval()
    with torch.no_grad():
        m.weight.copy_(torch.randn(4096))
    x = torch.randn(2, 16, 4096)
    g = asim.from_torch(m, x)
    inputs, want = asim.torch_inputs(m, x), pytorch_outputs(m, (x,), {})
    for strategy in asim.STRATEGIES:
        check(g, asim.simulate(asim.compile(g, strategy, "H100"), inputs).outputs, want, f"rmsnorm {strategy}")


# -- refusals: each names the problem and the fix ---------------------------------------------------------

class _Dropout(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(x) * 2


class _Branch(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


class _Loop(torch.nn.Module):
    def forward(self, x):
        while x.max() < 10:
            x = x * 2
        return x


class _Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


class _WhileLoop(torch.nn.Module):
    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop
        return while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t * 2), (torch.tensor(0), x))[1]


class _Cumprod(torch.nn.Module):
    def forward(self, t):
        return torch.cumprod(t, 0) + 1


def test_a_refusal_names_the_line_of_the_module_that_made_the_op():
    with pytest.raises(asim.AStitchError, match=r"cumprod.default is not supported.*test_torch_import.py.*torch.cumprod"):
        asim.from_torch(_Cumprod(), torch.randn(3))


def _bad(name):
    x = torch.randn(3, 4)
    return {
        "dropout in training mode": (_Dropout().train(), (x,), "export in eval mode"),
        "batch norm in training mode": (BnRelu(4).train(), (torch.randn(2, 4, 3, 3),), "eval mode"),
        "a Python if on a tensor": (_Branch(), (x,), "torch.where"),
        "a while loop on a tensor": (_Loop(), (x,), "move the loop out"),
        "torch.cond": (_Cond(), (x,), "torch.where"),
        "random numbers": (lambda t: t + torch.rand_like(t), (x,), "draw them outside the model"),
        "a boolean mask index": (lambda t: t[t > 0] * 2, (x,), "torch.where"),
        "an unsupported op": (lambda t: torch.cumprod(t, 0), (x,), "cumprod.default is not supported"),
        "a convolution": (torch.nn.Conv2d(2, 2, 3), (torch.randn(1, 2, 5, 5),), "import the glue around it"),
        "a complex tensor": (lambda t: t * 2, (torch.randn(3, dtype=torch.complex64),), "complex64 is not supported"),
        "an in-place update of an argument": (lambda t: t.add_(1), (x,), "return the new value"),
        "not a module": (42, (x,), "a torch.nn.Module or a function"),
        ".item()": (lambda t: t * t.sum().item(), (x,), r"reads a tensor's value into Python \(\.item\(\)"),
        "torch.while_loop": (_WhileLoop(), (x,), "move the loop out of the model"),
        "a float8 tensor": (lambda t: t.to(torch.float8_e4m3fn).float(), (x,), "float8_e4m3fn is not supported"),
    }[name]


@pytest.mark.parametrize("case", ["dropout in training mode", "batch norm in training mode", "a Python if on a tensor",
                                  "a while loop on a tensor", "torch.cond", "random numbers", "a boolean mask index",
                                  "an unsupported op", "a convolution", "a complex tensor",
                                  "an in-place update of an argument", "not a module", ".item()",
                                  "torch.while_loop", "a float8 tensor"])
def test_refusals_name_the_problem_and_the_fix(case):
    module, args, match = _bad(case)
    with pytest.raises(asim.AStitchError, match=match):
        asim.from_torch(module, *args)


def test_a_module_torch_export_refuses_carries_torchs_reason():
    with pytest.raises(asim.AStitchError, match="torch.export could not export _Branch") as e:
        asim.from_torch(_Branch(), torch.randn(3))
    assert "fix:" in str(e.value)


def test_without_torch_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(asim.AStitchError, match=r"pip install 'astitch-sim\[torch\]'"):
        asim.from_torch(lambda x: x, None)
