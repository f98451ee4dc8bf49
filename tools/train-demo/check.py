"""Checks of the numpy K3 (k3_numpy.py): its gradients against finite differences on a tiny
float64 model, and its logits against the engine's own (`k3 logits`) on a checkpoint.

  python3 tools/train-demo/check.py grad
  python3 tools/train-demo/check.py logits MODEL [--ids 1,2,3,...]
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import autograd as ag  # noqa: E402
from k3_numpy import K3, load_checkpoint  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
CLI = os.path.join(ROOT, 'dist', 'src', 'cli', 'main.js')


def synth(out, vocab, hidden, layers, experts, topk):
    subprocess.run(['node', CLI, 'synth', '--arch', 'k3', '--preset', 'demo', '--vocab', str(vocab), '--hidden', str(hidden),
                    '--layers', str(layers), '--experts', str(experts), '--top-k', str(topk), '--shards', '1', '--seed', '3',
                    '--out', out, '--force'], check=True, stdout=subprocess.DEVNULL)


def loss_of(model, ids, tgt, w):
    logits = model.forward(ids, train=True)
    return ag.cross_entropy(ag.reshape(logits, (-1, logits.shape[-1])), tgt.reshape(-1), w.reshape(-1))


def grad_check():
    """Float64, no storage rounding (the STE's gradient is the identity by construction, and
    rounding would make the finite differences step): analytic vs central differences."""
    with tempfile.TemporaryDirectory() as d:
        synth(d, 272, 64, 4, 4, 2)
        _, cfg, params, dtypes, _ = load_checkpoint(d, np.float64)
    rng = np.random.default_rng(0)
    for n in params:  # lift the near-zero inits so every path carries gradient
        params[n] = params[n] + rng.normal(0, 0.05, params[n].shape)
    dtypes = {n: 'F32' for n in dtypes}
    model = K3(cfg, params, dtypes)
    N, T = 2, 13  # T not a multiple of the KDA chunk
    ids = rng.integers(0, cfg.V, (N, T))
    tgt = rng.integers(0, cfg.V, (N, T))
    w = (rng.random((N, T)) < 0.7).astype(np.float64)
    loss = loss_of(model, ids, tgt, w)
    ag.backward(loss)
    grads = {n: v.g for n, v in model.vars.items()}
    worst = 0.0
    for name in sorted(params):
        g = grads[name]
        if g is None:
            g = np.zeros_like(params[name])
        flat = params[name].reshape(-1)
        for i in rng.choice(flat.size, min(3, flat.size), replace=False):
            old = flat[i]
            h = 1e-5
            flat[i] = old + h
            lp = loss_of(model, ids, tgt, w).v
            ag.clear()
            flat[i] = old - h
            lm = loss_of(model, ids, tgt, w).v
            ag.clear()
            flat[i] = old
            num = (lp - lm) / (2 * h)
            ana = g.reshape(-1)[i]
            err = abs(num - ana) / max(1e-6, abs(num) + abs(ana))
            worst = max(worst, err)
            if err > 1e-4:
                print(f'  {name}[{i}]: numeric {num:.6e} analytic {ana:.6e} (rel {err:.1e})')
    print(f'gradient check: worst relative error {worst:.2e} over {len(params)} tensors')
    return worst < 1e-4


def logits_check(model_dir, ids):
    _, cfg, params, dtypes, _ = load_checkpoint(model_dir)
    mine = K3(cfg, params, dtypes).forward(np.array([ids])).v[0]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'x.npy')
        subprocess.run(['node', CLI, 'logits', model_dir, '--ids', ','.join(map(str, ids)), '--out', out], check=True,
                       stdout=subprocess.DEVNULL)
        theirs = np.load(out).reshape(mine.shape)
    diff = np.abs(mine - theirs).max()
    print(f'logits {model_dir}: {len(ids)} positions, max |numpy - engine| {diff:.2e} (logit scale {np.abs(theirs).max():.2f})')
    return diff < 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('what', choices=['grad', 'logits'])
    ap.add_argument('model', nargs='?')
    ap.add_argument('--ids')
    args = ap.parse_args()
    if args.what == 'grad':
        ok = grad_check()
    else:
        _, cfg, _, _, _ = load_checkpoint(args.model)
        ids = [int(x) for x in args.ids.split(',')] if args.ids else list(np.random.default_rng(1).integers(0, cfg.V, 40))
        ok = logits_check(args.model, ids)
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
