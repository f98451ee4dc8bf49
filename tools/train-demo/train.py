"""Train the built-in demo model: a tiny Kimi K3 (k3_numpy.py, numpy only) that adds two numbers
below 100, in the K3 chat format (XTML), as a tiny agent with an `add` tool.

  node tools/train-demo/make-data.mjs                       (the data and the vocabulary, rendered by the engine)
  python3 tools/train-demo/train.py --minutes 60            (writes models-shipped/demo-k3-trained)
  python3 tools/train-demo/train.py --init DIR --minutes 30 (goes on from a checkpoint, e.g. a copy of the shipped one)
  node tools/train-demo/eval.mjs                            (held-out accuracies with the engine, into train.json)

The data (make-data.mjs: raw "ab+cd=" sums, sums asked in chat, add-tool calls and their results,
random other conversations) holds only training pairs; the held-out pairs come from its pairs.json
and go into train.json. Each batch is a run of examples of similar length (the vocabulary is
byte-level BPE, so a chat prompt is 100-300 tokens, a raw sum 10), padded at the end; the loss is
on the assistant's generated part only. The checkpoint is written in the official K3 layout with
the experts as MXFP4 (every few minutes too, so a stopped run leaves a model), and train.json
beside it records the command, the seed, the steps and the time.
"""

import os

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread is faster on a shared 2-core machine

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import mmap  # noqa: E402
import multiprocessing as mp  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import autograd as ag  # noqa: E402
from k3_numpy import K3, load_checkpoint, stored_tensors, write_safetensors  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
CLI = os.path.join(ROOT, 'dist', 'src', 'cli', 'main.js')


def synth_args(vocab):
    return ['synth', '--arch', 'k3', '--preset', 'demo', '--vocab', str(vocab), '--hidden', '128', '--layers', '4',
            '--experts', '8', '--top-k', '2', '--shards', '1', '--seed', '1']


def load_data(path):
    rows = [json.loads(line) for line in open(path)]
    rows.sort(key=lambda r: len(r['p']) + len(r['t']))
    return rows


def make_batch(rows, pad):
    """Ids [N, T] padded at the end (KDA has no mask; padding after a sequence cannot reach it),
    and the loss rows: flat positions whose next token is part of an assistant's reply."""
    seqs = [r['p'] + r['t'] for r in rows]
    T = max(map(len, seqs))
    ids = np.full((len(rows), T), pad, np.int64)
    pos, tgt = [], []
    for i, (r, s) in enumerate(zip(rows, seqs)):
        ids[i, :len(s)] = s
        for j in range(len(r['p']) - 1, len(s) - 1):
            pos.append(i * T + j)
            tgt.append(s[j + 1])
    return ids, np.array(pos), np.array(tgt)


def pick_batch(rng, rows, tokens):
    """A run of neighbours in length order from a random start, up to `tokens` padded tokens."""
    i = int(rng.integers(len(rows)))
    j = i + 1
    while j < len(rows) and (j + 1 - i) * (len(rows[j]['p']) + len(rows[j]['t'])) <= tokens:
        j += 1
    return rows[i:j]


class AdamW:
    def __init__(self, params, lr, betas=(0.9, 0.98), eps=1e-8, wd=0.01):
        self.p, self.lr, self.b1, self.b2, self.eps, self.wd = params, lr, betas[0], betas[1], eps, wd
        self.m = {n: np.zeros_like(t) for n, t in params.items()}
        self.v = {n: np.zeros_like(t) for n, t in params.items()}
        self.t = 0

    def step(self, grads, lr):
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for n, g in grads.items():
            m, v, p = self.m[n], self.v[n], self.p[n]
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            p *= 1 - lr * self.wd
            p -= lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


def shared(arrays):
    """Copies of the arrays in one anonymous shared mapping: a forked worker sees every update."""
    sizes = [(-(-a.nbytes // 64)) * 64 for a in arrays.values()]
    buf = mmap.mmap(-1, max(64, sum(sizes)))
    out, off = {}, 0
    for (n, a), size in zip(arrays.items(), sizes):
        v = np.frombuffer(buf, a.dtype, a.size, off).reshape(a.shape)
        v[...] = a
        out[n] = v
        off += size
    return out


def gradients(model, trainable, batch, pad):
    """Loss and gradients of one batch (the mean loss over its reply tokens)."""
    ids, pos, tgt = make_batch(batch, pad)
    logits = model.forward(ids, train=True, rows=pos)
    loss = ag.cross_entropy(logits, tgt, np.ones(len(tgt), np.float32))
    ag.backward(loss)
    return float(loss.v), {n: model.vars[n].g for n in trainable}


def worker(conn, model, trainable, out, pad):
    """A second process: gradients of the batches it is sent, written into `out` (shared)."""
    while (batch := conn.recv()) is not None:
        loss, grads = gradients(model, trainable, batch, pad)
        for n, g in grads.items():
            out[n][...] = 0 if g is None else g
        conn.send(loss)


def save(out, data_dir, params, dtypes, other, config, info):
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, 'model.safetensors'), stored_tensors(params, dtypes, other))
    json.dump(config, open(os.path.join(out, 'config.json'), 'w'), indent=2)
    for name in ('tiktoken.model', 'tokenizer_config.json'):
        shutil.copyfile(os.path.join(data_dir, name), os.path.join(out, name))
    json.dump(info, open(os.path.join(out, 'train.json'), 'w'), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default=os.path.join(ROOT, 'models', 'train-demo-data'))
    ap.add_argument('--out', default=os.path.join(ROOT, 'models-shipped', 'demo-k3-trained'))
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--steps', type=int, default=100000, help='at most this many steps')
    ap.add_argument('--minutes', type=float, default=60, help='and at most this long (the schedule follows whichever ends first)')
    ap.add_argument('--tokens', type=int, default=2048, help='padded tokens per batch')
    ap.add_argument('--lr', type=float, default=3e-3)
    ap.add_argument('--save-minutes', type=float, default=10)
    ap.add_argument('--init', help='go on from this checkpoint (same vocabulary) instead of a fresh template')
    ap.add_argument('--workers', type=int, default=2, help='processes computing gradients (data parallel, 1 or 2)')
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)

    tok_cfg = json.load(open(os.path.join(args.data, 'tokenizer_config.json')))
    vocab = int(max(map(int, tok_cfg['added_tokens_decoder']))) + 1
    start = args.init
    if start is None:
        start = os.path.join(ROOT, 'models', 'train-demo-template')
        subprocess.run(['node', CLI, *synth_args(vocab), '--out', start, '--force'], check=True, stdout=subprocess.DEVNULL)
    config, cfg, params, dtypes, other = load_checkpoint(start)
    for n in params:
        if n.endswith('e_score_correction_bias'):
            params[n][:] = 0  # the router's balancing bias is not trained here; zero keeps routing plain
    params = shared(params)
    trainable = {n: t for n, t in params.items() if not n.endswith('e_score_correction_bias')}
    print(f'{sum(t.size for t in trainable.values())} parameters, vocab {vocab}', flush=True)
    model = K3(cfg, params, dtypes)
    opt = AdamW(trainable, args.lr)
    rows = load_data(os.path.join(args.data, 'data.jsonl'))
    pad = vocab - 1  # [PAD]
    held = json.load(open(os.path.join(args.data, 'pairs.json')))['held_out']

    def info(step, secs, losses):
        return {
            'task': 'sums of two numbers below 100 in the K3 chat format: raw "ab+cd=" -> "0xy"; chat -> reasoning "a+b=s", '
                    'response "s"; with an add tool -> a call add(a, b), then the tool\'s number; other chats -> "OK."',
            'command': 'python3 tools/train-demo/train.py ' + ' '.join(sys.argv[1:]),
            'data': 'node tools/train-demo/make-data.mjs',
            'template': 'k3 ' + ' '.join(synth_args(vocab)), 'init': args.init,
            'seed': args.seed, 'steps': step, 'tokens_per_batch': args.tokens, 'workers': args.workers, 'lr': args.lr,
            'numpy': np.__version__, 'seconds': round(secs),
            'final_loss': {k: round(v, 5) for k, v in losses.items()},
            'held_out': held,
            'held_out_accuracy': None,
        }

    peer = None
    if args.workers > 1:
        other_grads = shared({n: np.zeros_like(t) for n, t in trainable.items()})
        peer, child = mp.get_context('fork').Pipe()
        mp.get_context('fork').Process(target=worker, args=(child, model, trainable, other_grads, pad), daemon=True).start()
    t0 = time.time()
    last_save = t0
    ema = {}
    step = 0
    while step < args.steps:
        frac = max(step / args.steps, (time.time() - t0) / (60 * args.minutes))
        if frac >= 1:
            break
        lr = args.lr * (frac / 0.03 if frac < 0.03 else 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * (frac - 0.03) / 0.97)))
        batch = pick_batch(rng, rows, args.tokens)
        if peer:
            peer.send(pick_batch(rng, rows, args.tokens))
        loss, grads = gradients(model, trainable, batch, pad)
        grads = {n: g if g is not None else np.zeros_like(trainable[n]) for n, g in grads.items()}
        if peer:
            loss = (loss + peer.recv()) / 2
            for n, g in grads.items():
                g += other_grads[n]
                g *= 0.5
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        if norm > 1.0:
            for g in grads.values():
                g *= 1.0 / norm
        opt.step(grads, lr)
        kind = max(set(r['k'] for r in batch), key=[r['k'] for r in batch].count)
        ema[kind] = 0.9 * ema.get(kind, loss) + 0.1 * loss
        step += 1
        if step % 50 == 0:
            print(f'step {step} {time.time() - t0:.0f}s lr {lr:.2e} ' + ' '.join(f'{k} {v:.4f}' for k, v in sorted(ema.items())), flush=True)
        if time.time() - last_save > 60 * args.save_minutes:
            save(args.out, args.data, params, dtypes, other, config, info(step, time.time() - t0, ema))
            last_save = time.time()
    if peer:
        peer.send(None)
    save(args.out, args.data, params, dtypes, other, config, info(step, time.time() - t0, ema))
    print(f'{step} steps in {time.time() - t0:.0f}s; wrote {args.out}', flush=True)


if __name__ == '__main__':
    main()
