"""Real PyTorch module code, written as the libraries write it, for tests/frontends/test_torch_import.py.

Each class follows its source (HF transformers' LLaMA, BERT, T5 and ViT; diffusers' ResNet block;
torchvision's conv-bn-relu tail; the optimizer updates as torch.optim's docs write them), cut to the part
between matrix products that AStitch plans.  ``CASES`` maps a name to a function of a size that gives
``(module or function, args, kwargs)``; module weights are random, not left at their initial values
(a LayerNorm's weight of ones would hide a missing multiply).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def _randomize(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in list(module.parameters()) + [b for b in module.buffers() if b.is_floating_point()]:
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
    return module.eval()


class LlamaRMSNorm(nn.Module):                      # transformers/models/llama/modeling_llama.py
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class T5LayerNorm(nn.Module):                       # transformers/models/t5/modeling_t5.py
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class BertSelfOutput(nn.Module):                    # transformers/models/bert/modeling_bert.py
    def __init__(self, hidden_size, eps=1e-12):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return self.LayerNorm(hidden_states + input_tensor)


class MaskedSoftmax(nn.Module):
    def forward(self, scores, mask):
        return F.softmax(scores.masked_fill(mask == 0, float("-inf")), dim=-1)


class BiasGelu(nn.Module):
    def __init__(self, n, approximate="none"):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n))
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x + self.bias, approximate=self.approximate)


class LlamaMLP(nn.Module):                          # SwiGLU: down(silu(gate(x)) * up(x))
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class ResnetNormAct(nn.Module):                     # diffusers ResnetBlock2D: norm1 -> nonlinearity
    def __init__(self, channels, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(num_groups=groups, num_channels=channels, eps=1e-6, affine=True)
        self.nonlinearity = nn.SiLU()

    def forward(self, input_tensor, temb):
        hidden_states = self.nonlinearity(self.norm1(input_tensor))
        return hidden_states + temb[:, :, None, None]


class LabelSmoothedCE(nn.Module):
    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels, label_smoothing=0.1, ignore_index=-100)


class LogSoftmaxNLL(nn.Module):
    def forward(self, logits, labels):
        return F.nll_loss(F.log_softmax(logits, dim=-1), labels)


class BnRelu(nn.Module):                            # torchvision: conv -> bn -> relu, the part after the conv
    def __init__(self, channels):
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.bn(x))


def rotate_half(x):                                 # transformers/models/llama/modeling_llama.py
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaRotary(nn.Module):                       # LlamaRotaryEmbedding + apply_rotary_pos_emb
    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q, k, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class CausalSelfAttention(nn.Module):               # nanoGPT's attention, the matmul path
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class HFAttentionWithPaddingMask(nn.Module):        # BertSelfAttention's eager path with get_extended_attention_mask
    def __init__(self, hidden, heads):
        super().__init__()
        self.num_attention_heads, self.attention_head_size = heads, hidden // heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        return x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        extended = attention_mask[:, None, None, :].to(hidden_states.dtype)
        extended = (1.0 - extended) * torch.finfo(hidden_states.dtype).min
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        probs = self.dropout(nn.functional.softmax(scores + extended, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.num_attention_heads * self.attention_head_size,))


class ViTPatchGlue(nn.Module):                      # ViTEmbeddings with the patch conv written as unfold + linear
    def __init__(self, channels, patch, hidden, num_patches):
        super().__init__()
        self.patch = patch
        self.projection = nn.Linear(channels * patch * patch, hidden)
        self.cls_token = nn.Parameter(torch.randn(1, 1, hidden))
        self.position_embeddings = nn.Parameter(torch.randn(1, num_patches + 1, hidden))

    def forward(self, pixel_values):
        b, c, h, w = pixel_values.shape
        p = self.patch
        patches = pixel_values.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        embeddings = self.projection(patches.reshape(b, (h // p) * (w // p), c * p * p))
        cls_tokens = self.cls_token.expand(b, -1, -1)
        embeddings = torch.cat((cls_tokens, embeddings), dim=1)
        return embeddings + self.position_embeddings


def adamw_step(param, grad, exp_avg, exp_avg_sq, step, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
               eps: float = 1e-8, weight_decay: float = 1e-2):
    """torch.optim.AdamW's update (the single-tensor path), written out; ``step`` a float tensor."""
    param = param * (1 - lr * weight_decay)
    exp_avg = exp_avg.lerp(grad, 1 - beta1)
    exp_avg_sq = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    denom = (exp_avg_sq.sqrt() / bias_correction2.sqrt()) + eps
    return param - step_size * exp_avg / denom, exp_avg, exp_avg_sq


def adam_step(param, grad, exp_avg, exp_avg_sq, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
              eps: float = 1e-8, step: int = 10):
    exp_avg = beta1 * exp_avg + (1 - beta1) * grad
    exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad.square()
    m_hat = exp_avg / (1 - beta1 ** step)
    v_hat = exp_avg_sq / (1 - beta2 ** step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), exp_avg, exp_avg_sq


def lion_step(param, grad, exp_avg, lr: float = 1e-4, beta1: float = 0.9, beta2: float = 0.99, wd: float = 0.1):
    """lucidrains/lion-pytorch's update_fn."""
    param = param * (1 - lr * wd)
    update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1).sign_()
    param = param + update * -lr
    exp_avg = exp_avg.mul(beta2).add_(grad, alpha=1 - beta2)
    return param, exp_avg


class AutocastMLP(nn.Module):                       # what autocast inserts, written out: low-precision matmuls
    def __init__(self, n, dtype):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.ln = nn.LayerNorm(n)
        self.dtype = dtype

    def forward(self, x):
        h = F.linear(x.to(self.dtype), self.fc.weight.to(self.dtype), self.fc.bias.to(self.dtype))
        h = F.gelu(h)                               # in the low precision, as autocast leaves it
        return self.ln(h.float()), F.softmax(h, dim=-1)


class EmbeddingAndIndexing(nn.Module):              # embedding, gather of labels, argmax, top-k, scatter_add, cumsum
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)

    def forward(self, ids, labels, counts):
        h = self.embed(ids)                                          # (B, T, D)
        logits = h @ self.embed.weight.t()                           # (B, T, V)
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        best, where = logits.max(dim=-1)
        top_vals, top_idx = torch.topk(logits, 3, dim=-1)
        hist = counts.scatter_add(1, ids, torch.ones_like(ids))
        last = h[:, -1]
        positions = torch.cumsum((ids != 0).to(torch.int64), dim=1)
        masked = torch.where(ids[..., None] > 2, h, torch.zeros_like(h)).masked_fill(labels[..., None] == 0, -1.0)
        return picked, best, where, top_vals, top_idx, hist, last, positions, masked


def _cases():
    g = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    def ints(lo, hi, *shape):
        return torch.randint(lo, hi, shape, generator=g)

    return {
        "llama_rmsnorm": lambda n: (_randomize(LlamaRMSNorm(n), 1), (randn(2, 3, n),), {}),
        "llama_rmsnorm_bf16": lambda n: (_randomize(LlamaRMSNorm(n), 1).to(torch.bfloat16),
                                         (randn(2, 3, n, dtype=torch.bfloat16),), {}),
        "t5_layernorm": lambda n: (_randomize(T5LayerNorm(n), 2), (randn(2, 5, n),), {}),
        "bert_self_output": lambda n: (_randomize(BertSelfOutput(n), 3), (randn(2, 4, n), randn(2, 4, n)), {}),
        "masked_softmax": lambda n: (MaskedSoftmax(), (randn(2, 3, n), (torch.arange(n) < n - 3).expand(2, 3, n)),
                                     {}),
        "bias_gelu": lambda n: (_randomize(BiasGelu(n), 4), (randn(3, n),), {}),
        "bias_gelu_tanh": lambda n: (_randomize(BiasGelu(n, "tanh"), 4), (randn(3, n),), {}),
        "swiglu": lambda n: (_randomize(LlamaMLP(n, 2 * n), 5), (randn(2, 3, n),), {}),
        "groupnorm_silu": lambda n: (_randomize(ResnetNormAct(n, 4), 6), (randn(2, n, 3, 3), randn(2, n)), {}),
        "cross_entropy_label_smoothing": lambda n: (LabelSmoothedCE(), (randn(6, n), torch.tensor([1, 0, -100, 3, 2, 1])),
                                                    {}),
        "log_softmax_nll": lambda n: (LogSoftmaxNLL(), (randn(4, n), ints(0, n, 4)), {}),
        "batchnorm_relu": lambda n: (_randomize(BnRelu(n), 7), (randn(2, n, 3, 3),), {}),
        "llama_rotary": lambda n: (LlamaRotary(n), (randn(2, 2, 5, n), randn(2, 2, 5, n),
                                                    torch.arange(5).expand(2, 5) + torch.tensor([[0], [7]])), {}),
        "causal_attention": lambda n: (_randomize(CausalSelfAttention(n, 2, 8), 8), (randn(2, 6, n),), {}),
        "hf_attention_padding_mask": lambda n: (_randomize(HFAttentionWithPaddingMask(n, 2), 9),
                                                (randn(2, 5, n), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])), {}),
        "vit_patch_glue": lambda n: (_randomize(ViTPatchGlue(3, 2, n, 4), 10), (randn(2, 3, 4, 4),), {}),
        "adamw_step": lambda n: (adamw_step, (randn(4, n), randn(4, n), randn(4, n), randn(4, n).abs(),
                                              torch.tensor(3.0)), {}),
        "adam_step": lambda n: (adam_step, (randn(4, n), randn(4, n), randn(4, n), randn(4, n).abs()), {}),
        "lion_step": lambda n: (lion_step, (randn(4, n), randn(4, n), randn(4, n)), {}),
        "autocast_bf16": lambda n: (_randomize(AutocastMLP(n, torch.bfloat16), 11), (randn(3, n),), {}),
        "autocast_f16": lambda n: (_randomize(AutocastMLP(n, torch.float16), 12), (randn(3, n),), {}),
        "embedding_and_indexing": lambda n: (_randomize(EmbeddingAndIndexing(n, 4), 13),
                                             (ints(0, n, 2, 5), ints(0, n, 2, 5), torch.zeros(2, n, dtype=torch.int64)),
                                             {}),
    }


CASES = _cases()
