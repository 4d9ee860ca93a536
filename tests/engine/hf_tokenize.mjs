// HuggingFace's tokenizers.js, the reference for colo's tokenizer.json reader: encodes each
// file (UTF-8) with the tokenizer.json given, as ordinary text (no special tokens added), and
// prints one JSON array of ids per file.
//
// usage: node hf_tokenize.mjs NODE_PREFIX TOKENIZER_JSON FILE...
// NODE_PREFIX: where `npm install --prefix` put @huggingface/tokenizers.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [prefix, tokPath, ...files] = process.argv.slice(2);
const lib = path.join(prefix, "node_modules", "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(lib).href);
const config = path.join(path.dirname(tokPath), "tokenizer_config.json");
const tok = new Tokenizer(JSON.parse(fs.readFileSync(tokPath, "utf8")),
                          fs.existsSync(config) ? JSON.parse(fs.readFileSync(config, "utf8")) : {});
for (const f of files) {
  const ids = tok.encode(fs.readFileSync(f, "utf8"), { add_special_tokens: false }).ids;
  process.stdout.write(JSON.stringify(ids) + "\n");
}
