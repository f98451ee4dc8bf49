"""Write the PyTorch model's logits of the shipped demo checkpoint on 32 positions to
test/fixtures/demo-trained/ (torch-logits.npy, float32 [32, vocab], and ids.json), for
test/demo-trained.test.ts to compare with the engine's (max |diff| < 1e-3).

  python3 tools/train-demo/export_logits.py [--model models-shipped/demo-k3-trained]
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from k3_torch import K3, load_checkpoint  # noqa: E402
from tokenizer import EOS, encode  # noqa: E402
from train import ROOT, answer, prompt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default=os.path.join(ROOT, 'models-shipped', 'demo-k3-trained'))
    ap.add_argument('--out', default=os.path.join(ROOT, 'test', 'fixtures', 'demo-trained'))
    args = ap.parse_args()
    torch.set_num_threads(2)
    _, cfg, params, dtypes, _ = load_checkpoint(args.model)
    ids = []
    for a, b in [(12, 34), (99, 1), (57, 68), (3, 40)]:  # problems with their answers: 4 x 10 tokens
        ids += encode(prompt(a, b) + answer(a, b)) + [EOS]
    ids = ids[:32]
    with torch.no_grad():
        logits = K3(cfg, params, dtypes).forward(torch.tensor([ids]))[0].numpy().astype(np.float32)
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, 'torch-logits.npy'), logits)
    json.dump({'ids': ids, 'model': 'models-shipped/demo-k3-trained', 'torch': torch.__version__},
              open(os.path.join(args.out, 'ids.json'), 'w'), indent=1)
    print(f'{logits.shape} logits to {args.out}')


if __name__ == '__main__':
    main()
