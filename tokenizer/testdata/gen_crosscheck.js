// Generates testdata/crosscheck/<name>.jsonl: random texts stitched from
// awkward pieces (contractions in odd cases, "ſ", exotic spaces, joiners,
// combining marks, digits of other scripts, emoji, special-token look-alikes)
// with the ids and decodes Hugging Face's Rust tokenizers produce for the
// shared real tokenizers.
//
// Regenerate from the package directory (needs Node and the npm package
// tokenizers@0.23.2, which wraps the Rust crate):
//
//	npm install tokenizers@0.23.2
//	node testdata/gen_crosscheck.js
//
// The Go tests only read the generated files.
const { Tokenizer } = require("tokenizers");
const fs = require("fs");
const path = require("path");

const shared = path.join(__dirname, "..", "..", "..", "shared");
const sources = {
  llama3: "tokenizers/llama3/tokenizer.json",
  qwen3: "tokenizers/qwen3/tokenizer.json",
  deepseek_v3: "tokenizers/deepseek_v3/tokenizer.json",
  mistral: "tokenizers/mistral/tokenizer.json",
  stories260K: "models/stories260K-hf/tokenizer.json",
};
const linesPerTokenizer = 400;

const atoms = ["'s", "'S", "'ſ", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'d", "'K", "'k", " ", "  ", "   ", "\t", "\n", "\r\n", "\r",
  "\u00a0", "\u3000", "\u0085", "\u2028", "\u200b", "\u200d", "\ufeff",
  "a", "Z", "hello", "World", "ſ", "K", "ß", "İ", "ﬀ", "é", "e\u0301", "0", "12", "345", "6789", "١٢٣", "½", "Ⅻ", "²",
  ".", ",", "!", "?", "...", "-", "_", "(", ")", "{", "}", "<", ">", "<s>", "</s>", "<unk>", "<|im_start|>", "<|endoftext|>",
  "<|begin_of_text|>", "<|eot_id|>", "<｜User｜>", "▁", "▁▁",
  "你好", "世界", "こんにちは", "カタカナ", "한국어", "Привет", "Ελλάδα", "مرحبا", "שלום", "हिन्दी", "ไทย", "😀", "👍🏽", "👨‍👩‍👧", "🇺🇸", "❤️",
  "\u212A", "'\u212A", "\u212B", "\u017F", "\u0130", "\u0301", "\u0308", "ñ", "Å", "ℌ", "①", "㍿", "Ａ", "$", "€", "£", "#", "@", "%", "^", "&", "*", "+", "=", "|", "\\", "/", "~", "`", "\"",
  "“", "”", "‘", "’", "—", "…", "\x00", "\x1b", "\x7f"];

let seed = 7;
function rnd() {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x7fffffff;
}

fs.mkdirSync(path.join(__dirname, "crosscheck"), { recursive: true });
(async () => {
  for (const [name, rel] of Object.entries(sources)) {
    const tok = Tokenizer.fromFile(path.join(shared, rel));
    const lines = [];
    for (let i = 0; i < linesPerTokenizer; i++) {
      let text = "";
      const n = 1 + Math.floor(rnd() * 12);
      for (let j = 0; j < n; j++) text += atoms[Math.floor(rnd() * atoms.length)];
      const ids = Array.from((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
      const withSpecial = Array.from((await tok.encode(text, null, { addSpecialTokens: true })).getIds());
      lines.push(JSON.stringify({
        text, ids, ids_with_special: withSpecial,
        // Raw decoder output: no clean_up_tokenization_spaces.
        decoded: await tok.decode(ids, false),
        decoded_skip_special: await tok.decode(withSpecial, true),
      }));
    }
    fs.writeFileSync(path.join(__dirname, "crosscheck", name + ".jsonl"), lines.join("\n") + "\n");
  }
})();
