// llama.cpp (node-llama-cpp's prebuilt CPU build) on GGUF files that colo-train export wrote.
// usage: node gguf_ref.mjs REF; reads requests from stdin, one JSON object a line, and answers each
// with one JSON line on stdout, so that llama.cpp is loaded once for a test's many files. A
// request: {"model": path, "texts": [...], "ids": [...], "lora": a LoRA adapter file to apply, or
// absent}. Its answer: each text's tokens as llama.cpp's tokenizer makes them (plain text: special
// tokens' names are not parsed, no BOS added), the mean negative log-likelihood of ids[1:] each
// given those before it (probabilities at temperature 1, nothing cut), the most likely token at
// each position, the model's BOS and EOS, and the file's architecture and chat template; or
// {"error": message} when llama.cpp could not load or run it.
import path from "node:path";
import readline from "node:readline";
import {pathToFileURL} from "node:url";

const [ref] = process.argv.slice(2);
const {getLlama} = await import(
  pathToFileURL(path.join(ref, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});

async function answer(req) {
  const model = await llama.loadModel({modelPath: req.model});
  try {
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
      // the last token is only predicted, never evaluated: a model of learned positions (GPT-2's)
      // has none past its block. The context keeps one place free: a full one is shifted, its
      // first tokens dropped, by node-llama-cpp.
      const n = ids.length - 1;
      const ctx = await model.createContext({contextSize: n + 1, batchSize: n,
        ...(req.lora ? {lora: {adapters: [{filePath: req.lora}]}} : {})});
      const seq = ctx.getSequence();
      const all = {temperature: 1, topK: 0, topP: 1, minP: 0};
      const input = ids.slice(0, n).map((t) => [t, {generateNext: {probabilities: true, options: all}}]);
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
    return out;
  } finally {
    await model.dispose();
  }
}

for await (const line of readline.createInterface({input: process.stdin})) {
  if (!line.trim()) continue;
  let out;
  try {
    out = await answer(JSON.parse(line));
  } catch (e) {
    out = {error: String(e && e.stack || e)};
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
await llama.dispose();
