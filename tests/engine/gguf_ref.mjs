// llama.cpp (node-llama-cpp's prebuilt CPU build) on a GGUF file that colo-train export wrote.
// usage: node gguf_ref.mjs REF REQUEST.json; the request: {"model": path, "texts": [...],
// "ids": [...], "lora": a LoRA adapter file to apply, or absent}. Prints one JSON object: each text's tokens as llama.cpp's tokenizer makes them
// (plain text: special tokens' names are not parsed, no BOS added), the mean negative
// log-likelihood of ids[1:] each given those before it (probabilities at temperature 1, nothing
// cut), the most likely token at each position, the model's BOS and EOS, and the file's
// architecture and chat template.
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [ref, reqPath] = process.argv.slice(2);
const {getLlama} = await import(
  pathToFileURL(path.join(ref, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const req = JSON.parse(fs.readFileSync(reqPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath: req.model});
const out = {
  tokens: (req.texts || []).map((t) => Array.from(model.tokenize(t, false))),
  bos: model.tokens.bos ?? null,
  eos: model.tokens.eos ?? null,
  architecture: model.fileInfo.metadata.general.architecture,
  chat_template: model.fileInfo.metadata.tokenizer?.chat_template ?? null,
  n_vocab: model.fileInsights.vocabularySize ?? null,
};
const ids = req.ids || [];
if (ids.length > 1) {
  const ctx = await model.createContext({contextSize: Math.max(64, ids.length), batchSize: ids.length,
    ...(req.lora ? {lora: {adapters: [{filePath: req.lora}]}} : {})});
  const seq = ctx.getSequence();
  const all = {temperature: 1, topK: 0, topP: 1, minP: 0};
  const input = ids.map((t, i) =>
    i + 1 < ids.length ? [t, {generateNext: {probabilities: true, options: all}}] : t);
  const res = await seq.controlledEvaluate(input);
  let nll = 0;
  out.top = [];
  for (let i = 0; i + 1 < ids.length; i++) {
    const p = res[i].next.probabilities; // most likely first
    nll -= Math.log(p.get(ids[i + 1]) ?? 0);
    out.top.push([...p.keys()][0]);
  }
  out.loss = nll / (ids.length - 1);
  await ctx.dispose();
}
console.log(JSON.stringify(out));
await model.dispose();
await llama.dispose();
