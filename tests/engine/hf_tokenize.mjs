// HuggingFace's tokenizers.js, the reference for colo's tokenizer.json reader: encodes each
// file (UTF-8) with the tokenizer.json given, as ordinary text (no special tokens added), and
// prints one JSON array of ids per file.
//
// usage: node hf_tokenize.mjs NODE_PREFIX TOKENIZER_JSON FILE...
//        node hf_tokenize.mjs NODE_PREFIX -
// NODE_PREFIX: where `npm install --prefix` put @huggingface/tokenizers. With "-" it serves
// requests, a line each on stdin: a JSON array [TOKENIZER_JSON, FILE...]; it answers each with
// one line, a JSON array of the files' id arrays (each tokenizer.json read once), until stdin ends.
import fs from "fs";
import path from "path";
import readline from "readline";
import { pathToFileURL } from "url";

const [prefix, tokPath, ...files] = process.argv.slice(2);
const lib = path.join(prefix, "node_modules", "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(lib).href);
const loaded = new Map();
function tokenizer(p) {
  if (!loaded.has(p)) {
    const config = path.join(path.dirname(p), "tokenizer_config.json");
    loaded.set(p, new Tokenizer(JSON.parse(fs.readFileSync(p, "utf8")),
                                fs.existsSync(config) ? JSON.parse(fs.readFileSync(config, "utf8")) : {}));
  }
  return loaded.get(p);
}
const encode = (tok, f) => tok.encode(fs.readFileSync(f, "utf8"), { add_special_tokens: false }).ids;
if (tokPath === "-") {
  for await (const line of readline.createInterface({ input: process.stdin, crlfDelay: Infinity })) {
    const [p, ...fs_] = JSON.parse(line);
    const tok = tokenizer(p);
    process.stdout.write(JSON.stringify(fs_.map((f) => encode(tok, f))) + "\n");
  }
} else {
  const tok = tokenizer(tokPath);
  for (const f of files)
    process.stdout.write(JSON.stringify(encode(tok, f)) + "\n");
}
