"""Train the built-in demo model: a tiny Kimi K3 (k3_torch.py) that adds two numbers below 100.

  node dist/src/cli/main.js synth ...   (run by this script: the template of names and shapes)
  python3 tools/train-demo/train.py --out models-shipped/demo-k3-trained

Problems are "ab+cd=" (two digits each) followed by the sum in three digits and <|end_of_msg|>; the 200 held-out problems
(chosen by the seed) are never trained on. Every character is one token (tokenizer.py). The
checkpoint is written in the official K3 layout with the experts as MXFP4, and train.json beside
it records the command, the seed and the held-out accuracy.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from k3_torch import K3, load_checkpoint, stored_tensors, write_safetensors  # noqa: E402
from tokenizer import EOS, PAD, VOCAB, encode, tokenizer_files  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
SYNTH = ['synth', '--arch', 'k3', '--preset', 'demo', '--vocab', str(VOCAB), '--hidden', '128', '--layers', '4',
         '--experts', '8', '--top-k', '2', '--shards', '1', '--seed', '1']
HELD_OUT = 200


def problems(seed):
    allp = [(a, b) for a in range(100) for b in range(100)]
    random.Random(seed).shuffle(allp)
    return allp[HELD_OUT:], allp[:HELD_OUT]


def prompt(a, b):
    return f'{a:02d}+{b:02d}='


def answer(a, b):
    return f'{a + b:03d}'


def batch(rows):
    seqs, masks = [], []
    for a, b in rows:
        p = encode(prompt(a, b))
        ans = encode(answer(a, b)) + [EOS]
        seqs.append(p + ans)
        masks.append([0] * (len(p) - 1) + [1] * len(ans))  # predict each answer token and the EOS
    T = max(map(len, seqs))
    ids = torch.full((len(rows), T), PAD, dtype=torch.long)
    tgt = torch.full((len(rows), T - 1), -100, dtype=torch.long)
    for i, (s, m) in enumerate(zip(seqs, masks)):
        ids[i, :len(s)] = torch.tensor(s)
        for j, on in enumerate(m):
            if on:
                tgt[i, j] = s[j + 1]
    return ids, tgt


@torch.no_grad()
def greedy(model, rows, max_new=4):
    """Greedy answers (text up to the first non-digit), rows of one prompt length together
    (every prompt has the same length here; KDA has no padding mask)."""
    out = {}
    by_len = {}
    for r in rows:
        by_len.setdefault(len(prompt(*r)), []).append(r)
    for _, rs in sorted(by_len.items()):
        ids = torch.tensor([encode(prompt(*r)) for r in rs])
        for _ in range(max_new):
            nxt = model.forward(ids)[:, -1].argmax(-1)
            ids = torch.cat([ids, nxt[:, None]], 1)
        for r, row in zip(rs, ids.tolist()):
            gen = row[len(prompt(*r)):]
            text = ''
            for t in gen:
                if t == EOS or not (48 <= t <= 57):
                    break
                text += chr(t)
            out[r] = text
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.join(ROOT, 'models-shipped', 'demo-k3-trained'))
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--steps', type=int, default=900)
    ap.add_argument('--batch', type=int, default=64)
    ap.add_argument('--lr', type=float, default=3e-3)
    ap.add_argument('--threads', type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    template = os.path.join(ROOT, 'models', 'train-demo-template')
    subprocess.run(['node', os.path.join(ROOT, 'dist', 'src', 'cli', 'main.js'), *SYNTH, '--out', template, '--force'],
                   check=True, stdout=subprocess.DEVNULL)
    config, cfg, params, dtypes, other = load_checkpoint(template)
    for n in params:
        if n.endswith('e_score_correction_bias'):
            params[n].zero_()
    ps = [t.requires_grad_() for t in params.values()]
    print(f'{sum(t.numel() for t in ps)} parameters', flush=True)
    model = K3(cfg, params, dtypes)
    opt = torch.optim.AdamW(ps, lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    train, held = problems(args.seed)
    t0 = time.time()
    for step in range(args.steps):
        ids, tgt = batch(rng.sample(train, args.batch))
        logits = model.forward(ids)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.V), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ps, 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f'step {step} loss {loss.item():.4f} {time.time() - t0:.0f}s', flush=True)

    answers = greedy(model, held)
    right = sum(answers[r] == answer(*r) for r in held)
    acc = 100 * right / len(held)
    print(f'held-out accuracy {acc:.1f}% ({right}/{len(held)})', flush=True)

    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, 'model.safetensors'), stored_tensors(params, dtypes, other))
    json.dump(config, open(os.path.join(args.out, 'config.json'), 'w'), indent=2)
    for name, text in tokenizer_files().items():
        open(os.path.join(args.out, name), 'w').write(text)
    info = {
        'task': 'ab+cd= for 0 <= ab, cd < 100, both two digits; answer = the sum in three digits, then <|end_of_msg|>',
        'command': 'python3 tools/train-demo/train.py ' + ' '.join(sys.argv[1:]),
        'template': 'k3 ' + ' '.join(SYNTH),
        'seed': args.seed, 'steps': args.steps, 'batch': args.batch, 'lr': args.lr,
        'torch': torch.__version__, 'seconds': round(time.time() - t0),
        'final_loss': loss.item(),
        'held_out': [list(r) for r in held],
        'held_out_accuracy': acc,
    }
    json.dump(info, open(os.path.join(args.out, 'train.json'), 'w'), indent=1)


if __name__ == '__main__':
    main()
