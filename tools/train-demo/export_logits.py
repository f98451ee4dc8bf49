"""Write the numpy model's logits of the shipped demo checkpoint on 32 positions to
test/fixtures/demo-trained/ (numpy-logits.npy, float32 [32, vocab], and ids.json),
for test/model/demo-trained.test.ts to compare with the engine's (max |diff| < 1e-3).

  python3 tools/train-demo/export_logits.py [--model models-shipped/demo-k3-trained]
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from k3_numpy import K3, load_checkpoint  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default=os.path.join(ROOT, 'models-shipped', 'demo-k3-trained'))
    ap.add_argument('--out', default=os.path.join(ROOT, 'test', 'fixtures', 'demo-trained'))
    args = ap.parse_args()
    _, cfg, params, dtypes, _ = load_checkpoint(args.model)
    eos = cfg.V - 16 + 2  # <|end_of_msg|>
    ids = []
    for a, b in [(12, 34), (99, 1), (57, 68), (3, 40)]:  # raw problems with their answers: 4 x 10 tokens (one byte each)
        ids += list(f'{a:02d}+{b:02d}={a + b:03d}'.encode()) + [eos]
    ids = ids[:32]
    logits = K3(cfg, params, dtypes).forward(np.array([ids])).v[0].astype(np.float32)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, 'numpy-logits.npy'), logits)
    json.dump({'ids': ids, 'model': 'models-shipped/demo-k3-trained', 'numpy': np.__version__},
              open(os.path.join(args.out, 'ids.json'), 'w'), indent=1)
    print(f'{logits.shape} logits to {args.out}')


if __name__ == '__main__':
    main()
