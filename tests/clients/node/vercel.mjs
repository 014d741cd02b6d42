// The Vercel AI SDK (`ai` + `@ai-sdk/openai`, Responses API) against `streamfold serve`.
// Usage: node vercel.mjs CASE (STREAMFOLD_URL = the server's /v1 URL). Prints one JSON object
// of what the client saw; tests/clients/test_node_clients.py asserts on it.
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, Output, streamText, stepCountIs, tool } from "ai";
import { z } from "zod";

const openai = createOpenAI({ baseURL: process.env.STREAMFOLD_URL, apiKey: "unused" });

const weatherTool = tool({
  description: "The current weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ city, temperature: "22C", sky: "sunny" }),
});

function summary(result) {
  return {
    text: result.text,
    finishReason: result.finishReason,
    reasoning: result.reasoningText ?? null,
    steps: result.steps.length,
    toolCalls: result.steps.flatMap((s) => s.toolCalls.map((c) => ({ name: c.toolName, input: c.input }))),
    toolResults: result.steps.flatMap((s) => s.toolResults.map((r) => r.output)),
    warnings: result.warnings ?? [],
  };
}

async function streamed(options) {
  const result = streamText({ ...options, onError: () => {} });
  const parts = [];
  for await (const part of result.fullStream) {
    parts.push(part.type === "error" ? { type: "error", error: String(part.error?.message ?? part.error) } : { type: part.type });
  }
  const steps = await result.steps;
  return {
    text: await result.text,
    finishReason: await result.finishReason,
    reasoning: (await result.reasoningText) ?? null,
    steps: steps.length,
    toolCalls: steps.flatMap((s) => s.toolCalls.map((c) => ({ name: c.toolName, input: c.input }))),
    partTypes: [...new Set(parts.map((p) => p.type))],
    errors: parts.filter((p) => p.type === "error").map((p) => p.error),
  };
}

// gpt-oss is a reasoning model, but the SDK knows only OpenAI's names: `forceReasoning` says so.
const reasoning = { openai: { forceReasoning: true, reasoningSummary: "auto" } };
// Structured outputs on the native engine's random-weight model: only an enforced schema parses.
const pet = z.object({
  name: z.string().regex(/^[a-z]{2,8}$/),
  age: z.number().int().min(0).max(30),
  kind: z.enum(["cat", "dog"]),
  tags: z.array(z.object({ code: z.string().regex(/^[A-Z][0-9]{2}$/) })).min(1).max(2),
});
const cases = {
  "generate-object": () =>
    generateObject({ model: openai("tiny"), schema: pet, prompt: "A pet.", maxOutputTokens: 300 }).then(
      (r) => ({ object: r.object, finishReason: r.finishReason }),
    ),
  "output-object": () =>
    generateText({
      model: openai("tiny"),
      prompt: "A pet.",
      output: Output.object({ schema: pet }),
      maxOutputTokens: 300,
    }).then((r) => ({ object: r.output, finishReason: r.finishReason })),
  generate: () => generateText({ model: openai("chat"), prompt: "Hello", providerOptions: reasoning }).then(summary),
  stream: () => streamed({ model: openai("chat"), prompt: "Hello", providerOptions: reasoning }),
  "generate-tools": () =>
    generateText({
      model: openai("weather"),
      prompt: "What is the weather in Paris?",
      tools: { get_weather: weatherTool },
      stopWhen: stepCountIs(5),
      providerOptions: reasoning,
    }).then(summary),
  "stream-tools": () =>
    streamed({
      model: openai("weather"),
      prompt: "What is the weather in Paris?",
      tools: { get_weather: weatherTool },
      stopWhen: stepCountIs(5),
      providerOptions: reasoning,
    }),
  "generate-failed": () =>
    generateText({ model: openai("broken"), prompt: "Hello" }).then(
      (r) => ({ threw: false, text: r.text }),
      (e) => ({ threw: true, name: e.name, message: String(e.message) }),
    ),
  "stream-failed": () => streamed({ model: openai("broken"), prompt: "Hello" }),
  logprobs: () =>
    generateText({ model: openai("chat"), prompt: "Hello", providerOptions: { openai: { logprobs: 2 } } }).then(
      (r) => ({ text: r.text, logprobs: r.providerMetadata?.openai?.logprobs ?? null }),
    ),
  "stream-logprobs": async () => {
    const result = streamText({ model: openai("chat"), prompt: "Hello", providerOptions: { openai: { logprobs: true } } });
    await result.consumeStream();
    const metadata = await result.providerMetadata;
    return { text: await result.text, logprobs: metadata?.openai?.logprobs ?? null };
  },
};

const name = process.argv[2];
if (!(name in cases)) {
  console.error(`unknown case ${name}; one of ${Object.keys(cases).join(", ")}`);
  process.exit(2);
}
console.log(JSON.stringify(await cases[name]()));
