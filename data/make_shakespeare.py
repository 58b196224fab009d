"""Builds data/shakespeare.txt, the default corpus of `flowlab train lstm-lm`,
from tinyshakespeare (karpathy/char-rnn, data/tinyshakespeare/input.txt,
1,115,394 bytes, sha256 of its first 10,001 lines as cut here:
b8928856fb6e54c4a8a3d77e3492aee05f54ac937452396b2fbe261f25a01ae0).

    python3 data/make_shakespeare.py input.txt > data/shakespeare.txt

The text is Shakespeare's (public domain). It keeps the first 10,001 lines
(to the end of a speech), lowercases them and splits , . ; : ! ? into
words of their own, as the Penn Treebank recipe does: 59,620 words, 5,802
distinct; the 999 most frequent cover 87.2% of the text.
"""
import re
import sys

lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
n = 10000
while lines[n].strip() != "":
    n += 1
for line in lines[:n]:
    line = re.sub(r"([,.;:!?])", r" \1 ", line.lower())
    line = re.sub(r"-{2,}", " -- ", line)
    words = line.split()
    if words:
        print(" ".join(words))
