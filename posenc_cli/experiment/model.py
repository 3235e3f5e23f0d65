"""A small decoder-only transformer with pluggable positions, and the torch side of each position method.

No positional formula is derived here: the sinusoidal table comes from :func:`posenc_cli.rope.encodings.sinusoidal`,
the ALiBi slopes from :func:`posenc_cli.rope.encodings.alibi_slopes`, and RoPE's inverse frequencies and attention
factor
(plain, linear interpolation, static NTK, YaRN) from :func:`posenc_cli.rope.scaling.make_request` and
:func:`posenc_cli.rope.frequencies.for_request` (or :func:`~posenc_cli.rope.frequencies.compute`), the code ``posenc
scale``
uses. This module only turns those numpy arrays into tensors and applies them: RoPE in the rotate-half layout
(``rotate_half``, as Hugging Face Llama), with the attention factor multiplying cos and sin; ALiBi as
``-m_h * (i - j)`` added to the causal scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch  # noqa: TID253 - this package is imported only by `posenc experiment`
import torch.nn.functional as F  # noqa: TID253
from torch import Tensor, nn  # noqa: TID253

from posenc_cli.rope.encodings import alibi_slopes, sinusoidal
from posenc_cli.rope.frequencies import RopeSpec, compute, for_request
from posenc_cli.rope.scaling import DEFAULT_THETA, make_request

#: Position methods a model is trained with; ``rope+linear``, ``rope+ntk`` and ``rope+yarn`` reuse the RoPE model.
KINDS = ("nope", "sinusoidal", "learned", "rope", "alibi")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    kind: str  # one of KINDS
    max_len: int  # the training length: the learned table's size
    theta: float = DEFAULT_THETA

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class Rotary:
    """RoPE as applied at one evaluation: float32 inverse frequencies and the cos/sin multiplier."""

    inv_freq: Tensor
    attention_factor: float
    scaling: str | None  # None (as trained), "linear", "ntk" or "yarn"
    factor: float


def rotary_for(scaling: str | None, train_len: int, eval_len: int, head_dim: int,
               theta: float = DEFAULT_THETA) -> Rotary:
    """RoPE frequencies for the model trained at ``train_len`` and run at ``eval_len``.

    ``scaling`` is None (plain RoPE, as trained) or ``linear``, ``ntk`` or ``yarn`` with factor
    ``max(1, eval_len / train_len)``: the request ``posenc scale`` would build, resolved by
    ``frequencies.for_request`` (transformers' arithmetic).
    """
    if scaling is None:
        freqs = compute(RopeSpec({"rope_type": "default", "rope_theta": float(theta)}, head_dim, train_len))
        factor = 1.0
    else:
        target = max(eval_len, train_len)
        factor = target / train_len
        req = make_request(scaling, factor=factor, original_max=train_len, target=target, theta=theta,
                           head_dim=head_dim)
        freqs = for_request(req)
    return Rotary(torch.from_numpy(freqs.inv_freq.copy()), float(freqs.attention_factor), scaling, factor)


def rope_cos_sin(rotary: Rotary, length: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """cos and sin of ``position * inv_freq`` (float32, shape ``(length, head_dim/2)``), times the attention factor."""
    inv = rotary.inv_freq.to(device=device, dtype=torch.float32)
    pos = torch.arange(length, device=device, dtype=torch.float32)
    angles = pos[:, None] * inv[None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)
    if rotary.attention_factor != 1.0:
        cos = cos * rotary.attention_factor
        sin = sin * rotary.attention_factor
    return cos, sin


def apply_rope_half(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE in the rotate-half layout: pair ``(i, i + d/2)`` turns by ``angle_i`` (``x`` is ``(..., seq, d)``)."""
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def alibi_bias_torch(n_heads: int, length: int, device: torch.device | str = "cpu") -> Tensor:
    """Causal ALiBi bias ``(n_heads, length, length)``: ``-m_h * (i - j)`` for keys ``j <= i``, ``-inf`` above.

    The slopes are posenc's :func:`~posenc_cli.rope.encodings.alibi_slopes` (the paper's recipe).
    """
    slopes = torch.from_numpy(alibi_slopes(n_heads)).to(device=device, dtype=torch.float32)
    idx = torch.arange(length, device=device)
    offset = (idx[None, :] - idx[:, None]).to(torch.float32)  # key minus query, <= 0 where visible
    bias = slopes[:, None, None] * offset
    return bias.masked_fill(offset > 0, float("-inf"))


def sinusoidal_table(length: int, d_model: int, device: torch.device | str = "cpu") -> Tensor:
    """posenc's sinusoidal encoding (float32) as a tensor of shape ``(length, d_model)``."""
    return torch.from_numpy(sinusoidal(length, d_model, dtype="float32")).to(device)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor] | None, bias: Tensor | None) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if rope is not None:
            q = apply_rope_half(q, *rope)
            k = apply_rope_half(k, *rope)
        if bias is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        out: Tensor = x + self.mlp(self.ln2(x))
        return out


class TinyLM(nn.Module):
    """Pre-LayerNorm decoder-only transformer; positions as ``cfg.kind`` says."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.kind not in KINDS:
            raise ValueError(f"unknown position kind {cfg.kind!r}")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.kind == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=1.0)

    def forward(self, tokens: Tensor, rotary: Rotary | None = None) -> Tensor:
        """Logits ``(batch, seq, vocab)``. ``rotary`` overrides the trained RoPE (scaling at evaluation time)."""
        n = tokens.shape[1]
        device = tokens.device
        kind = self.cfg.kind
        x = self.embed(tokens)
        if kind == "sinusoidal":
            x = x + sinusoidal_table(n, self.cfg.d_model, device)
        elif kind == "learned":
            assert self.pos_embed is not None
            if n > self.cfg.max_len:
                raise ValueError(f"the learned table has {self.cfg.max_len} positions; cannot run {n}")
            x = x + self.pos_embed(torch.arange(n, device=device))
        rope = None
        if kind == "rope":
            rot = rotary if rotary is not None else rotary_for(None, self.cfg.max_len, n, self.cfg.head_dim,
                                                               self.cfg.theta)
            rope = rope_cos_sin(rot, n, device)
        bias = alibi_bias_torch(self.cfg.n_heads, n, device) if kind == "alibi" else None
        for block in self.blocks:
            x = block(x, rope, bias)
        logits: Tensor = self.head(self.ln_f(x))
        return logits


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def bits(nats: float) -> float:
    return nats / math.log(2)
