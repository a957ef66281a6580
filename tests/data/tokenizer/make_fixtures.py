#!/usr/bin/env python3
"""Makes the tokenizer fixtures of tests/unit/test_tokenizer.c and tests/apps/test_tokenize.sh.

Not run by CI (it needs Python with `tokenizers` and `tiktoken`: pip install tokenizers
tiktoken). Run it from anywhere; it writes next to itself (with --cases-only, only cases/,
from the tokenizers already there, training only those missing):

  llama3.json      a byte-level BPE (3000 merges) trained here with a Llama-3-style
                   pre-tokenizer (Split on the Llama-3 regex, then ByteLevel), ignore_merges,
                   merges as [a, b] pairs, three special tokens and one plain added token
  deepseek.json    a smaller one (600 merges) with a DeepSeek-V3-style Sequence of three
                   Splits, merges as "a b" strings, no ignore_merges
  gpt2.json        a GPT-2-style one (400 merges): ByteLevel alone, its regex and a prefix
                   space; added tokens with lstrip, rstrip and single_word
  splits.json      Splits that remove digits, merge a space (a String pattern) with what is
                   before it and punctuation with what follows (200 merges)
  tiktoken.model   the first tokenizer's byte sequences as a tiktoken rank file
  tokenizer_config.json  Kimi-style special tokens (added_tokens_decoder) for it
  post-processors  llama3.json: ByteLevel then TemplateProcessing "<|begin_of_text|> $A" (as
                   Llama-3.1 ships it); deepseek.json: TemplateProcessing with a BOS and an EOS;
                   gpt2.json: RobertaProcessing (cls <|begin_of_text|>, sep <|end_of_text|>)
  cases/NAME.txt   the texts (raw UTF-8 bytes)
  cases/NAME.KIND.ids    the ids that tokenizers / tiktoken give for them, comma-separated:
                   KIND is llama3 / deepseek / gpt2 / splits (HF, add_special_tokens=False, specials matched),
                   tiktoken (Kimi's pattern, specials allowed) and tiktoken-ordinary (none);
                   KIND-special: llama3 / deepseek / gpt2 with add_special_tokens=True (the
                   post-processors' tokens around the ids)

With --post-only, only the post-processors are written into the three tokenizers (the rest
of each file kept) and the KIND-special ids made.

The training text is TRAIN_EXTRA and clmoe's docs/*.md and lib/io/*.c as they are when this
runs: a later run learns other merges, so commit every file it writes together.
"""
import base64
import json
import os
import sys

import tiktoken
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers import AddedToken

HERE = os.path.dirname(os.path.abspath(__file__))

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK_PATTERNS = [
    r"\p{N}{1,3}",
    r"[一-龥\u3040-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
    r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
# tokenization_kimi.py's pat_str (Kimi-Linear-48B-A3B on the hub), with its class intersections
KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
PLAIN_ADDED = "<tool>"  # an added token that is not special

CASES = {
    "english": "The quick brown fox jumps over the lazy dog. It's what they'd've DONE, isn't it? "
               "I'LL SEE. We're here; you've been there.\n",
    "code": "def f(x):\n    return {'a': [x ** 2, 0x1F, 3.14e-10]}  # comment\n\n\tif (a != b && c >= d) { y += 1; }\r\n"
            "int main(void) { printf(\"%d\\n\", 42); }\n",
    "cjk": "中文分词测试：我们今天去北京大学。日本語のテキスト、カタカナとひらがな。한국어 문장도 있습니다。",
    "emoji": "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨ and a lone © ™ ∑ ∞.",
    "digits": "1234567890123456789012345678901234567890 and 3.14159265358979 and 1,000,000 and ١٢٣٤٥ and ５６７",
    "spaces": "a  b   c    d\t\t\te\n\n\n\nf          \n   \r\n\r\n  g" + " " * 40 + "h\n" + "\t" * 9 + "end   ",
    "mixed": "Ünïcödé façade naïve café — Ελληνικά, русский текст, العربية, עברית, हिन्दी, ไทย. "
             "Combining: e\u0301 a\u0308 n\u0303. Mixed中文English混合123abc。",
    "unicode": "no\u00a0break\u3000ideographic\u2028line\u0085next\u200bzero\u00adsoft ſ'S IT'ſ it's "
               "İstanbul ǅemal Straße ﬁne ＡＢＣ ①②③ ½ x\u2009y\u202fz \U0001F600\u200d\U0001F4BB end\n",
    "strip": "a  <lstrip>b<rstrip>   c word words sword word. <lstrip><lstrip> x<rstrip>\n\ny <|eot_id|>",
    "specials": "<|begin_of_text|>Hello<|eot_id|> world<|end_of_text|><tool>x <|begin_of_text|>  <|eot_id|>\n"
                "<|begin_of_text <|eot_id|<|eot_id|>",
}

# other text of the same scripts, so that merges inside CJK, emoji and digits exist without
# the cases themselves becoming single tokens
TRAIN_EXTRA = ("北京是中国的首都，大学里有很多学生。我们学习中文和日本語。東京の天気は晴れです。カタカナ。"
               "서울은 한국의 수도입니다. 😀😀👍 🇫🇷 ❤️ 2024 2025 31415926 100000 "
               "Привет, как дела? Γειά σου κόσμε. مرحبا بالعالم. café naïve über. "
               "    indented code\n\treturn x;\n  }\n")


def training_text():
    parts = [TRAIN_EXTRA * 5]
    docs = os.path.join(HERE, "..", "..", "..", "docs")
    for name in sorted(os.listdir(docs)):
        if name.endswith(".md"):
            with open(os.path.join(docs, name), encoding="utf-8") as f:
                parts.append(f.read())
    src = os.path.join(HERE, "..", "..", "..", "lib", "io")
    for name in sorted(os.listdir(src)):
        if name.endswith(".c"):
            with open(os.path.join(src, name), encoding="utf-8") as f:
                parts.append(f.read())
    return parts


def train(pre, merges, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + merges, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, min_frequency=2)
    tok.train_from_iterator(training_text(), trainer)
    tok.add_special_tokens(SPECIALS)
    tok.add_tokens([AddedToken(PLAIN_ADDED, special=False)])
    return tok


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def write_ids(case, kind, ids):
    write(os.path.join("cases", f"{case}.{kind}.ids"), (",".join(map(str, ids)) + "\n").encode())


# Post-processors as tokenizers serializes them (checked: tokenizers loads each file again).
def template(single, specials):
    items = [{"SpecialToken": {"id": w, "type_id": 0}} if w != "$A" else {"Sequence": {"id": "A", "type_id": 0}}
             for w in single.split()]
    return {"type": "TemplateProcessing", "single": items, "pair": items + [{"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in specials.items()}}


def add_post_processors():
    """Writes the post-processors into llama3.json, deepseek.json and gpt2.json and the ids
    that add_special_tokens=True gives for two cases."""
    for name, kind in (("llama3.json", "llama3"), ("deepseek.json", "deepseek"), ("gpt2.json", "gpt2")):
        with open(os.path.join(HERE, name), encoding="utf-8") as f:
            spec = json.load(f)
        ids = {a["content"]: a["id"] for a in spec["added_tokens"]}
        bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
        if kind == "llama3":
            post = {"type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                template(bos + " $A", {bos: ids[bos]})]}
        elif kind == "deepseek":
            post = template(bos + " $A " + eos, {bos: ids[bos], eos: ids[eos]})
        else:
            post = {"type": "RobertaProcessing", "sep": [eos, ids[eos]], "cls": [bos, ids[bos]],
                    "trim_offsets": True, "add_prefix_space": True}
        spec["post_processor"] = post
        text = json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
        tok = Tokenizer.from_str(text)
        write(name, text.encode())
        for case in ("english", "specials"):
            with open(os.path.join(HERE, "cases", case + ".txt"), encoding="utf-8") as f:
                src = f.read()
            plain = tok.encode(src, add_special_tokens=False).ids
            full = tok.encode(src, add_special_tokens=True).ids
            assert full != plain, (kind, case)
            write_ids(case, kind + "-special", full)


def main():
    if "--post-only" in sys.argv[1:]:
        add_post_processors()
        return
    os.makedirs(os.path.join(HERE, "cases"), exist_ok=True)
    # --cases-only: the committed tokenizers kept, only the texts and their ids written again
    cases_only = "--cases-only" in sys.argv[1:]
    if cases_only:
        llama = Tokenizer.from_file(os.path.join(HERE, "llama3.json"))
    else:
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        llama = train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"), byte_level]),
                      3000, True)
        deep = train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(p), "isolated") for p in DEEPSEEK_PATTERNS]
                                             + [byte_level]), 600, False)
        llama.save(os.path.join(HERE, "llama3.json"), pretty=False)
        # the older form of merges, "a b" strings, in the second file
        spec = json.loads(deep.to_str())
        spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]
        write("deepseek.json", json.dumps(spec, ensure_ascii=False, separators=(",", ":")).encode())
    deep = Tokenizer.from_file(os.path.join(HERE, "deepseek.json"))
    # GPT-2 style: ByteLevel alone with its own regex and a prefix space; added tokens that
    # strip white space on their left or right or stand as single words
    if not cases_only or not os.path.exists(os.path.join(HERE, "gpt2.json")):
        gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), 400, False)
        gpt2.add_tokens([AddedToken("<lstrip>", lstrip=True, special=True), AddedToken("<rstrip>", rstrip=True),
                         AddedToken("word", single_word=True)])
        gpt2.save(os.path.join(HERE, "gpt2.json"), pretty=False)
    gpt2 = Tokenizer.from_file(os.path.join(HERE, "gpt2.json"))
    # the other Split behaviours, a string pattern among them
    if not cases_only or not os.path.exists(os.path.join(HERE, "splits.json")):
        splits = train(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(r"\p{N}+"), "removed"),
            pre_tokenizers.Split(" ", "merged_with_previous"),
            pre_tokenizers.Split(Regex(r"[,.;:!?。]"), "merged_with_next"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 200, False)
        splits.save(os.path.join(HERE, "splits.json"), pretty=False)
    splits = Tokenizer.from_file(os.path.join(HERE, "splits.json"))

    # tiktoken ranks: the Llama-3-style tokenizer's byte sequences, bytes 0-255 first, then the
    # merged tokens in merge order
    # GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest for U+0100..
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}
    spec = json.loads(llama.to_str())
    vocab = spec["model"]["vocab"]
    ranks = {bytes([b]): b for b in range(256)}
    for a, b in spec["model"]["merges"]:
        tok = bytes(byte_of[c] for c in a + b)
        if tok not in ranks:
            ranks[tok] = len(ranks)
    lines = [base64.b64encode(t).decode() + " " + str(r) for t, r in sorted(ranks.items(), key=lambda kv: kv[1])]
    if not cases_only:
        write("tiktoken.model", ("\n".join(lines) + "\n").encode())
    nbase = len(ranks)
    named = {nbase + 0: "[BOS]", nbase + 1: "[EOS]", nbase + 2: "<|im_end|>", nbase + 5: "<|im_user|>"}
    config = {"added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                                "single_word": False, "special": True} for i, c in named.items()},
              "bos_token": "[BOS]", "eos_token": "[EOS]", "tokenizer_class": "TikTokenTokenizer"}
    if not cases_only:
        write("tokenizer_config.json", (json.dumps(config, indent=2) + "\n").encode())
    specials = {named.get(i, f"<|reserved_token_{i}|>"): i for i in range(nbase, nbase + 256)}
    enc = tiktoken.Encoding(name="fixture", pat_str=KIMI_PATTERN, mergeable_ranks=ranks, special_tokens=specials)

    kimi_specials = "[BOS]Hello<|im_end|> world<|im_user|>[EOS] <|reserved_token_%d|>x [BOS" % (nbase + 7)
    cases = dict(CASES, kimi=kimi_specials)
    cases["all"] = "".join(CASES.values())
    for name, text in cases.items():
        write(os.path.join("cases", name + ".txt"), text.encode("utf-8"))
        for kind, tok in (("llama3", llama), ("deepseek", deep), ("gpt2", gpt2), ("splits", splits)):
            enc_ = tok.encode(text, add_special_tokens=False)
            if kind not in ("gpt2", "splits"):  # a prefix space, stripped spaces, removed digits
                assert tok.decode(enc_.ids, skip_special_tokens=False) == text, (kind, name)
            write_ids(name, kind, enc_.ids)
        write_ids(name, "tiktoken", enc.encode(text, allowed_special="all"))
        write_ids(name, "tiktoken-ordinary", enc.encode_ordinary(text))
    add_post_processors()
    print("vocab", len(vocab), "merges", len(spec["model"]["merges"]), "tiktoken base", nbase)


if __name__ == "__main__":
    main()
