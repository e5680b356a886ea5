#!/usr/bin/env python3
"""Golden encodings for trellis's tokenizer.json reader, from Hugging Face
tokenizers itself.

Trains two small byte-level BPE tokenizers with the `tokenizers` library on
the default corpus's text (Debian's fortunes, as `trellis data --corpus`
reads it) and writes, under tests/golden/tokenizers/:
  gpt2.json     GPT-2's layout: the ByteLevel pre-tokenizer with its own
                regex, a ByteLevel post-processor and decoder, the
                <|endoftext|> special token, merges written as "a b" strings
                (as GPT-2's published tokenizer.json has them)
  llama3.json   Llama 3's layout: a Split pre-tokenizer with Llama 3's regex
                then ByteLevel without one, ignore_merges, Llama 3's special
                tokens, and a post-processor that puts <|begin_of_text|> in
                front (Sequence of ByteLevel and TemplateProcessing); merges
                as pairs (what this library writes today)
  qwen2.json    Qwen2's layout: an NFC normalizer, a Split pre-tokenizer
                with Qwen2's regex (digits one by one) then ByteLevel, ChatML
                special tokens, and "café" added as a normalized (not
                special) token, which the normalized text matches
  cases.json    for each tokenizer, each text of TEXTS below: the ids of
                tokenizer.encode(text) (special tokens added, as
                `trellis data` does for a whole file) and
                tokenizer.decode(ids, skip_special_tokens=False); and for
                the whole default corpus as one text, its byte count, its
                token count and a fingerprint of its ids (the sum of
                (i + 1) * id[i] modulo 2^64)

    pip install tokenizers
    python3 tests/golden/make_tokenizer_golden.py

With --bench TOKENIZER.json, it instead times tokenizers on the default
corpus (one string, then documents in batches on every core) for the
comparison with `trellis data --tokenizer`.
"""
import json
import os
import sys
import time

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizers")
FORTUNES = "/usr/share/games/fortunes"

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = [
    "",
    " ",
    "Hello world",
    "  leading spaces and trailing spaces   ",
    "I'll say it: DON'T, won't, she'd, THEY'RE, we've, I'm.",
    "Numbers: 0 7 42 1234567890 3.14159 -12,500 2026-12-07 1e-5 ٣٤٥ ½",
    "tabs\tand\t\tnew\nlines\n\n\nand\r\nwindows\r\n\r\nendings \n \n",
    "whitespace runs:     five,\u00a0nbsp,\u2003em space,\u3000ideographic, \u2028 line sep",
    "Unicode: café naïve Ærøskøbing straße Ελληνικά Русский текст 中文字符 日本語のテキスト 한국어",
    "Emoji 🙂🎉👩‍👩‍👧 and symbols ∑∫√∞ ≠ ≤ → ★ © ® ™ and combining e\u0301",
    "punctuation!!! ??? ... ;;; --- ((nested)) [brackets] {braces} <angle> \"quotes\" 'single'",
    "code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; }  // comment",
    "special tokens: <|endoftext|>between<|endoftext|> <|begin_of_text|> <|eot_id|>\n"
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|> and <|notatoken|>",
    "<|endoftext|>",
    "A fortune: You will be married within a year, and divorced within two.\n",
    # where normalization changes the text: a combining accent, the ohm and
    # angstrom signs, Hangul jamo, a ligature and full-width digits (NFKC's)
    "cafe\u0301 and café, \u2126 ohm, \u212b, \u1112\u1161\u11ab, \ufb01ne, \uff11\uff12",
    "<|im_start|>user\nde\u0301ja\u0300 vu<|im_end|>",
]


def corpus_text():
    names = sorted(n for n in os.listdir(FORTUNES)
                   if not n.startswith(".") and "." not in n
                   and os.path.isfile(os.path.join(FORTUNES, n))
                   and not os.path.islink(os.path.join(FORTUNES, n)))
    out = []
    for n in names:
        with open(os.path.join(FORTUNES, n), "rb") as f:
            for line in f.read().splitlines(keepends=True):
                if line != b"%\n" and line != b"%":
                    out.append(line)
    return b"".join(out).decode("utf-8")


def train(tok, text, vocab, specials):
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    docs = text.split("\n\n")
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


def gpt2_style(text):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return train(tok, text, 1200, ["<|endoftext|>"])


def llama3_style(text):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]
    tok = train(tok, text, 1500, specials)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def qwen2_style(text):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok = train(tok, text, 1300, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken("café", normalized=True, special=False)])
    return tok


def merges_as_strings(path):
    """GPT-2's published file writes each merge as one "a b" string."""
    with open(path) as f:
        j = json.load(f)
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    with open(path, "w") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)


def byte_letters(text):
    """text's UTF-8 bytes in GPT-2's byte alphabet (how vocab entries are spelled)."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    letter, n = {}, 0
    for b in range(256):
        if b in keep:
            letter[b] = chr(b)
        else:
            letter[b] = chr(256 + n)
            n += 1
    return "".join(letter[b] for b in text.encode("utf-8"))


def whole_word_token(path, word):
    """A vocabulary entry no merge makes: only ignore_merges takes it (as
    Llama 3's vocabulary has, converted from tiktoken)."""
    with open(path) as f:
        j = json.load(f)
    vocab = j["model"]["vocab"]
    vocab[byte_letters(word)] = max(max(vocab.values()), max(a["id"] for a in j["added_tokens"])) + 1
    with open(path, "w") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)


def bench(path):
    tok = Tokenizer.from_file(path)
    text = corpus_text()
    mb = len(text.encode("utf-8")) / 1e6
    t = time.perf_counter()
    n = len(tok.encode(text).ids)
    one = time.perf_counter() - t
    docs = [d + "\n" for d in text.split("\n")]
    t = time.perf_counter()
    m = sum(len(e.ids) for e in tok.encode_batch(docs, add_special_tokens=False))
    batch = time.perf_counter() - t
    print(f"tokenizers {path}: {mb:.2f} MB of text")
    print(f"  one string: {n} tokens in {one:.2f} s, {mb / one:.2f} MB/s")
    print(f"  encode_batch of {len(docs)} lines, {os.cpu_count()} cores: {m} tokens in "
          f"{batch:.2f} s, {mb / batch:.2f} MB/s")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--bench":
        bench(sys.argv[2])
        return
    os.makedirs(HERE, exist_ok=True)
    text = corpus_text()
    cases = {}
    for name, make, strings in (("gpt2", gpt2_style, True), ("llama3", llama3_style, False),
                                ("qwen2", qwen2_style, False)):
        path = os.path.join(HERE, name + ".json")
        make(text).save(path)
        if strings:
            merges_as_strings(path)
        elif name == "llama3":
            whole_word_token(path, " Ærøskøbing")
        tok = Tokenizer.from_file(path)
        out = []
        for t in TEXTS:
            ids = tok.encode(t).ids
            out.append({"text": t, "ids": ids,
                        "decoded": tok.decode(ids, skip_special_tokens=False)})
        ids = tok.encode(text).ids
        fp = sum((i + 1) * x for i, x in enumerate(ids)) % (1 << 64)
        cases[name] = {"texts": out,
                       "corpus": {"bytes": len(text.encode("utf-8")), "tokens": len(ids),
                                  "fingerprint": str(fp)}}
        print(f"{path}: vocabulary {tok.get_vocab_size()}")
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    print("wrote", os.path.join(HERE, "cases.json"))


if __name__ == "__main__":
    main()
