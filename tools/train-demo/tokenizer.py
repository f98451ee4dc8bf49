"""The demo model's tokenizer: every byte is one token (ids 0..255, no merges) and 16 special
slots after them named like the engine's demo tokenizer (src/tokenizer/demo.ts), so 272 ids.
Written as tiktoken.model + tokenizer_config.json, the files the engine reads."""

import base64
import json

NUM_BASE = 256
NUM_SPECIAL = 16
VOCAB = NUM_BASE + NUM_SPECIAL
SPECIALS = {0: '[BOS]', 1: '[EOS]', 2: '<|end_of_msg|>', 3: '<|open|>', 4: '<|close|>', 5: '<|sep|>',
            6: '[start_header_id]', 7: '[end_header_id]', 9: '[EOT]', 10: '<|media_begin|>',
            11: '<|media_content|>', 12: '<|media_end|>', 13: '<|media_pad|>', 14: '[UNK]', 15: '[PAD]'}
EOS = NUM_BASE + 2  # <|end_of_msg|>: config.json's eos_token_id (vocab - 14)
PAD = NUM_BASE + 15


def encode(text):
    return list(text.encode('utf-8'))


def tokenizer_files():
    lines = [f'{base64.b64encode(bytes([b])).decode()} {b}' for b in range(256)]
    added = {str(NUM_BASE + off): {'content': c, 'lstrip': False, 'normalized': False, 'rstrip': False,
                                   'single_word': False, 'special': True} for off, c in SPECIALS.items()}
    config = {
        'added_tokens_decoder': added,
        'additional_special_tokens': ['<|end_of_msg|>'],
        'bos_token': '[BOS]',
        'clean_up_tokenization_spaces': False,
        'eos_token': '[EOS]',
        'model_max_length': 1048576,
        'num_reserved_special_tokens': NUM_SPECIAL,
        'pad_token': '[PAD]',
        'tokenizer_class': 'TikTokenTokenizer',
        'unk_token': '[UNK]',
    }
    return {'tiktoken.model': '\n'.join(lines) + '\n', 'tokenizer_config.json': json.dumps(config, indent=2) + '\n'}
