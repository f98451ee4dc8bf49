"""Compare the trainer's numpy forward (train.py) with the engine's reference forward (check.mjs) on the
same drafter and anchors: scores and confidences must agree to float32 rounding, drafts exactly.

  node tools/train-dspark/check.mjs --drafter DIR --out /tmp/scores.json
  python3 tools/train-dspark/check.py --drafter DIR --scores /tmp/scores.json [--calibration]

--calibration also prints, per slot, the confidence head's mean estimate and the slot's hit rate
(teacher forced) on the trainer's validation sequences: what the width model will read it for.
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from train import ROOT, Data, Drafter, pick_batch, run_batch  # noqa: E402
from k3_numpy import read_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--drafter', required=True)
    ap.add_argument('--data', default=os.path.join(ROOT, 'models', 'train-dspark-data'))
    ap.add_argument('--scores', required=True)
    ap.add_argument('--calibration', action='store_true')
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.drafter, 'config.json')))
    params = {n: (t.astype(np.uint32) << 16).view(np.float32).copy() for n, (_, t) in read_safetensors(os.path.join(args.drafter, 'model.safetensors')).items()}
    data = Data(args.data)
    model = Drafter(cfg, data)
    worst = 0.0
    for e in json.load(open(args.scores)):
        off, P, L, toff = data.seqs[e['seq']]
        a = e['anchor']
        toks = data.tokens[off:off + L].copy()
        toks[a + 1:a + 1 + len(e['tokens'])] = e['tokens'][:len(toks) - a - 1]  # teacher-force the engine's own drafts
        taps = np.array(data.taps[toff:toff + L - 1])[None]
        st, _ = run_batch(model, params, (taps, np.array([[a]]), np.ones((1, 1), np.float32), [toks]), 4.0, False, keep_scores=True)
        sc = st['scores'][0, 0]
        want = np.array(e['scores'])
        k = min(len(want), L - 1 - a)  # slots past the sequence's end have no teacher-forced previous id
        diff = float(np.abs(sc[:k] - want[:k]).max() / np.abs(want[:k]).max())
        worst = max(worst, diff)
        print(f"seq {e['seq']} anchor {a}: engine {e['tokens']} numpy {sc.argmax(-1).tolist()} "
              f"max rel diff {diff:.2e}; confidence engine {np.round(e['confidence'], 4).tolist()} numpy {np.round(st['conf'][0, 0], 4).tolist()}")
    print(f'worst relative difference {worst:.2e}')
    if args.calibration:
        calibration(model, params, data)
    if worst > 1e-3:
        sys.exit(1)


def calibration(model, params, data):
    n = len(data.seqs)
    val = np.random.default_rng(0).permutation(n)[:max(16, n // 20)]  # train.py's validation split
    rng = np.random.default_rng(123)
    hit, conf, mask = [], [], []
    for _ in range(10):
        st, _ = run_batch(model, params, pick_batch(rng, data, val, 8, 24), 4.0, False)
        hit.append(st['hit'].reshape(-1, st['hit'].shape[-1]))
        conf.append(st['conf'].reshape(hit[-1].shape))
        mask.append(st['mask'].reshape(hit[-1].shape))
    h, c, m = (np.concatenate(x) for x in (hit, conf, mask))
    for k in range(h.shape[1]):
        sel = m[:, k] > 0
        print(f'slot {k}: confidence {c[sel, k].mean():.3f}, hit {h[sel, k].mean():.3f} ({int(sel.sum())} anchors)')


if __name__ == '__main__':
    main()
