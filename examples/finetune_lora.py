"""LoRA fine-tuning of a small Qwen3-MoE-shaped model whose MoE blocks run
on moec, next to the same model in plain torch: the loss falls, the two
loss curves track each other, and both print tokens/s.

    python3 examples/finetune_lora.py                  # a GPU if there is one
    python3 examples/finetune_lora.py --device cpu --steps 30 --small

The model (embedding, pre-norm attention + MoE layers, LM head; random
weights, nothing downloaded) is written here in plain torch, so the example
needs only torch and moec. The data are synthetic: sequences of a random
bigram "language" with low entropy. Every base weight is frozen; what
trains is a rank-r LoRA adapter per expert on both expert projections
(moec.torch.MoE(lora_rank=r, lora_alpha=alpha): the router and the base
experts frozen, gradients of x and the adapters from the backward that
moe-autodiff derives). The torch model computes the same layer with
torch ops (per-expert loops, index_add) and the same adapters.

On a GPU machine without the compiler, pass --bundle with the kernels
compiled where the compiler is: `--emit-bundle lora.moecb` writes them
with `block.save_bundle(path)` (the training pair moe_block_fwd /
moe_block_grad, and the inference entry, of this model's block shape).
"""

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from torch import nn

import moec
import moec.torch


def make_config(small: bool) -> dict:
    if small:
        return dict(vocab=128, hidden=64, heads=4, inter=32, experts=8,
                    top_k=2, layers=2)
    # Qwen3-MoE's routing (top-8 of 64, renormalized) at a size a naive
    # LoRA kernel can train in seconds.
    return dict(vocab=2048, hidden=512, heads=8, inter=256, experts=64,
                top_k=8, layers=2)


class TorchLoraMoE(nn.Module):
    """The moec block's math in torch ops: router softmax, top-k,
    renormalized; per expert SwiGLU(x · (W_gu + s·B·A)ᵀ) · (W_d + s·B·A)ᵀ,
    with the adapters applied as x·Aᵀ·Bᵀ (not merged)."""

    def __init__(self, block: moec.torch.MoE):
        super().__init__()
        self.k, self.inter = block.top_k, block.intermediate_size
        self.r, self.s = block.lora_rank, block.lora_scaling
        self.gate = copy.deepcopy(block.gate)
        for name in ("w_gate_up", "w_down", "gate_up_lora_A",
                     "gate_up_lora_B", "down_lora_A", "down_lora_B"):
            setattr(self, name, copy.deepcopy(getattr(block, name)))

    def forward(self, x):
        shape, x = x.shape, x.reshape(-1, x.shape[-1])
        probs = F.linear(x, self.gate.weight).float().softmax(dim=-1)
        weights, ids = probs.topk(self.k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        r, s = self.r, self.s
        for e in range(self.w_down.shape[0]):
            token, slot = (ids == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            rows = slice(e * r, (e + 1) * r)

            def lora_linear(v, w, a, b):
                return F.linear(v, w[e]) + s * F.linear(F.linear(v, a[rows]),
                                                        b[:, rows])
            h = lora_linear(x[token], self.w_gate_up, self.gate_up_lora_A,
                            self.gate_up_lora_B)
            a = F.silu(h[:, :self.inter]) * h[:, self.inter:]
            d = lora_linear(a, self.w_down, self.down_lora_A,
                            self.down_lora_B)
            out = out.index_add(0, token, d * weights[token, slot, None])
        return out.reshape(shape)


class Layer(nn.Module):
    def __init__(self, hidden, heads, moe):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.out = nn.Linear(hidden, hidden, bias=False)
        self.moe = moe

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads,
                                               -1).unbind(2)
        att = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
            is_causal=True)
        x = x + self.out(att.transpose(1, 2).reshape(b, t, h))
        return x + self.moe(self.norm2(x))


class Model(nn.Module):
    def __init__(self, c, blocks):
        super().__init__()
        self.embed = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(Layer(c["hidden"], c["heads"], blk)
                                    for blk in blocks)
        self.norm = nn.RMSNorm(c["hidden"])
        self.head = nn.Linear(c["hidden"], c["vocab"], bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x)).float()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               ids[:, 1:].reshape(-1))


def bigram_batches(vocab, batch, seq, steps, device, seed=0):
    """`steps` batches [batch, seq] of a random bigram chain in which each
    token has 4 likely successors."""
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 4), generator=gen)
    for _ in range(steps):
        tokens = torch.empty(batch, seq, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, vocab, (batch,), generator=gen)
        for t in range(1, seq):
            pick = torch.randint(0, 4, (batch,), generator=gen)
            tokens[:, t] = successors[tokens[:, t - 1], pick]
        yield tokens.to(device)


def train(model, batches, lr):
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    losses, tokens_seen, elapsed = [], 0, 0.0
    for step, ids in enumerate(batches):
        if ids.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = model(ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())  # also waits for the step
        if step >= 2:  # the first steps compile kernels / warm up
            elapsed += time.perf_counter() - start
            tokens_seen += ids.numel()
    return losses, tokens_seen / max(elapsed, 1e-9)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device",
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--small", action="store_true",
                        help="a tiny model (the CPU test)")
    parser.add_argument("--bundle", help="precompiled kernels (moec.load)")
    parser.add_argument("--emit-bundle", metavar="PATH",
                        help="compile the block's kernels for sm_90a to PATH "
                             "and exit")
    parser.add_argument("--check", action="store_true",
                        help="exit non-zero unless the loss fell and the "
                             "curves track")
    args = parser.parse_args()

    # --emit-bundle compiles the GPU shape unless --small says otherwise.
    c = make_config(args.small or (args.device == "cpu"
                                   and not args.emit_bundle))
    dtype = torch.bfloat16
    bundle = moec.load(args.bundle) if args.bundle else None

    def block():
        return moec.torch.MoE(c["hidden"], c["inter"], c["experts"],
                              c["top_k"], dtype=dtype, bundle=bundle,
                              lora_rank=args.rank, lora_alpha=args.alpha)

    if args.emit_bundle:
        # Exactly the entries the blocks look for: moe_block, and the
        # training pair with the backward to x and the adapters.
        bundle = block().save_bundle(args.emit_bundle, "sm_90a")
        print(f"wrote {args.emit_bundle}: "
              f"{', '.join(sorted({e.name for e in bundle.entries}))}")
        return

    torch.manual_seed(0)
    moec_model = Model(c, [block() for _ in range(c["layers"])]).to(
        args.device, dtype)
    for p in moec_model.parameters():
        p.requires_grad_(False)
    blocks = [layer.moe for layer in moec_model.layers]
    with torch.no_grad():
        for blk in blocks:  # a trained router: logits of order 1
            blk.gate.weight.mul_(c["hidden"] ** 0.5 / 4)
    for blk in blocks:
        for a in blk.adapters():
            a.requires_grad_(True)
    torch_model = copy.deepcopy(moec_model)
    for layer in torch_model.layers:
        layer.moe = TorchLoraMoE(layer.moe)
    trainable = sum(p.numel() for p in moec_model.parameters()
                    if p.requires_grad)
    print(f"{c['layers']} MoE layers on moec, LoRA r={args.rank} "
          f"alpha={args.alpha} on {c['experts']} experts (top-{c['top_k']}, "
          f"hidden {c['hidden']}); {trainable:,} trainable parameters; "
          f"device {args.device}")

    results = {}
    for name, model in (("torch", torch_model), ("moec", moec_model)):
        batches = bigram_batches(c["vocab"], args.batch, args.seq,
                                 args.steps, args.device)
        results[name] = train(model, batches, args.lr)
    (torch_losses, torch_tps), (moec_losses, moec_tps) = (
        results["torch"], results["moec"])
    print(f"{'step':>5} {'torch loss':>11} {'moec loss':>10}")
    for step in range(0, args.steps, max(1, args.steps // 10)):
        print(f"{step:5d} {torch_losses[step]:11.4f} {moec_losses[step]:10.4f}")
    print(f"final {torch_losses[-1]:11.4f} {moec_losses[-1]:10.4f}")
    if torch_tps and moec_tps:
        print(f"tokens/s: torch {torch_tps:,.0f}, moec {moec_tps:,.0f} "
              f"({moec_tps / torch_tps:.2f}x)")
    tail = max(1, args.steps // 4)
    torch_tail = sum(torch_losses[-tail:]) / tail
    moec_tail = sum(moec_losses[-tail:]) / tail
    fell = moec_tail < 0.9 * moec_losses[0]
    # Only the adapters train, so a wrong adapter gradient shows in the
    # whole curve; early on the runs differ only by rounding.
    early = min(5, args.steps)
    tracks = abs(moec_tail - torch_tail) <= 0.05 * torch_tail and all(
        abs(m - t) <= 0.01 * t for m, t in zip(moec_losses[:early],
                                                 torch_losses[:early]))
    print(f"loss fell: {fell} ({moec_losses[0]:.3f} -> {moec_tail:.3f}); "
          f"tracks torch within 5 % (first steps 1 %): {tracks} "
          f"({torch_tail:.3f})")
    if args.check and not (fell and tracks):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
