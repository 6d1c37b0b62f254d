"""Fine-tuning a Qwen3-MoE-shaped model whose MoE blocks run on moec,
next to the same model in plain torch: the loss falls, the two loss curves
track each other, and both print tokens/s.

    python3 examples/finetune_moe.py                   # a GPU if there is one
    python3 examples/finetune_moe.py --device cpu --steps 30 --small

The model is built from a config with random weights (nothing is
downloaded); the data are synthetic: sequences of a fixed random bigram
"language" with low entropy, so that there is something to learn. Both
models start from the same weights and see the same batches; the moec one
has its sparse MoE blocks swapped for moec.torch.MoE
(moec.torch.replace_moe_blocks), whose forward and backward are the
kernels moec derives (moe-autodiff). Full fine-tuning in bf16 with AdamW
(LoRA on the experts: examples/finetune_lora.py).

`--micro-batches N` accumulates the gradients of N micro-batches per
optimizer step. `--main-grad` then gives the moec model's experts f32 main
gradients (replace_moe_blocks(main_grad=True)): the weight-gradient
kernels add each micro-batch's gradient to `.main_grad` in f32, where the
torch model adds bf16 `.grad`s; the optimizer step takes the sum as the
experts' `.grad`.

Needs torch, transformers and moec (`pip install .`, or
PYTHONPATH=build/python_packages after `make`); on the GPU machine without
the compiler, the moec side needs precompiled bundles (docs/python.md).
"""

import argparse
import copy
import time

import torch
import transformers

import moec.torch


def make_config(small: bool):
    if small:
        return transformers.Qwen3MoeConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128,
            moe_intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
            max_position_embeddings=256)
    # Qwen3-30B-A3B's expert shape (E 128, top-8, I 768, H 2048), 4 layers.
    return transformers.Qwen3MoeConfig(
        vocab_size=4096, hidden_size=2048, intermediate_size=6144,
        moe_intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=16, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
        max_position_embeddings=4096)


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


def train(model, batches, lr, micro_batches=1):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses, tokens_seen, elapsed = [], 0, 0.0
    for step, ids in enumerate(batches):
        if ids.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = 0.0
        for part in ids.tensor_split(micro_batches):
            part_loss = model(input_ids=part, labels=part).loss
            (part_loss / micro_batches).backward()
            loss += part_loss.detach() / micro_batches
        for p in model.parameters():
            # The experts' f32 main gradients (main_grad=True, made by the
            # first training forward): the sum, as the optimizer of these
            # bf16 weights takes it.
            if getattr(p, "main_grad", None) is not None:
                p.grad = p.main_grad.to(p.dtype)
                p.main_grad.zero_()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss))  # also waits for the step
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
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--micro-batches", type=int, default=1,
                        help="gradient accumulation: micro-batches per step")
    parser.add_argument("--main-grad", action="store_true",
                        help="the moec experts accumulate into f32 "
                             "main gradients")
    parser.add_argument("--small", action="store_true",
                        help="a tiny model (the CPU test)")
    parser.add_argument("--check", action="store_true",
                        help="exit non-zero unless the loss fell and the "
                             "curves track")
    args = parser.parse_args()

    config = make_config(args.small or args.device == "cpu")
    torch.manual_seed(0)
    dtype = torch.bfloat16
    # Initialized on the device: the GPU model's 2.4 B parameters take
    # about a minute to initialize on the CPU.
    with torch.device(args.device):
        torch_model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=dtype)
    moec_model = copy.deepcopy(torch_model)
    swapped = moec.torch.replace_moe_blocks(moec_model,
                                            main_grad=args.main_grad)
    print(f"{len(swapped)} MoE blocks on moec; {config.num_experts} experts, "
          f"top-{config.num_experts_per_tok}, hidden {config.hidden_size}, "
          f"device {args.device}")

    results = {}
    for name, model in (("torch", torch_model), ("moec", moec_model)):
        batches = bigram_batches(config.vocab_size, args.batch, args.seq,
                                 args.steps, args.device)
        results[name] = train(model, batches, args.lr, args.micro_batches)
    (torch_losses, torch_tps), (moec_losses, moec_tps) = (
        results["torch"], results["moec"])
    print(f"{'step':>5} {'torch loss':>11} {'moec loss':>10}")
    for step in range(0, args.steps, max(1, args.steps // 10)):
        print(f"{step:5d} {torch_losses[step]:11.4f} {moec_losses[step]:10.4f}")
    print(f"final {torch_losses[-1]:11.4f} {moec_losses[-1]:10.4f}")
    if torch_tps and moec_tps:
        print(f"tokens/s: torch {torch_tps:,.0f}, moec {moec_tps:,.0f} "
              f"({moec_tps / torch_tps:.2f}x)")
    # bf16 training of two implementations drifts apart slowly: compare the
    # averages of the last quarter of the curves.
    tail = max(1, args.steps // 4)
    torch_tail = sum(torch_losses[-tail:]) / tail
    moec_tail = sum(moec_losses[-tail:]) / tail
    fell = moec_tail < 0.9 * moec_losses[0]
    # Early on the two runs differ only by rounding: a wrong expert gradient
    # shows there first (later, attention alone could learn the bigrams).
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
