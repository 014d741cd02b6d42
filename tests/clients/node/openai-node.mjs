// The official OpenAI Node SDK (`openai`) against `streamfold serve`.
// Usage: node openai-node.mjs CASE (STREAMFOLD_URL = the server's /v1 URL). Prints one JSON
// object of what the client saw; tests/clients/test_node_clients.py asserts on it.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.STREAMFOLD_URL, apiKey: "unused", maxRetries: 0 });
const tools = [
  {
    type: "function",
    name: "get_weather",
    description: "The current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    strict: false,
  },
];

async function toolLoop(create) {
  // The application's loop: call the model, run each function call, send the outputs back,
  // until the model answers instead of calling (at most 5 steps).
  let input = [{ role: "user", content: "What is the weather in Paris?" }];
  const calls = [];
  for (let step = 1; step <= 5; step++) {
    const response = await create(input);
    const pending = response.output.filter((item) => item.type === "function_call");
    if (pending.length === 0) return { steps: step, calls, text: response.output_text, status: response.status };
    input = [...input, ...response.output];
    for (const call of pending) {
      calls.push({ name: call.name, arguments: JSON.parse(call.arguments) });
      input.push({ type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ temperature: "22C" }) });
    }
  }
  return { steps: 6, calls, text: null, status: "loop did not end" };
}

async function collect(stream) {
  const types = [];
  let final = null;
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.completed" || event.type === "response.failed") final = event.response;
  }
  return { types, final };
}

const cases = {
  create: async () => {
    const r = await client.responses.create({ model: "chat", input: "Hello" });
    return { status: r.status, text: r.output_text, types: r.output.map((i) => i.type), completedAt: r.completed_at };
  },
  stream: async () => {
    const { types, final } = await collect(await client.responses.create({ model: "chat", input: "Hello", stream: true }));
    return { types: [...new Set(types)], last: types.at(-1), text: final.output_text ?? final.output.at(-1).content[0].text };
  },
  "stream-helper": async () => {
    const stream = client.responses.stream({ model: "chat", input: "Hello" });
    let deltas = "";
    stream.on("response.output_text.delta", (e) => (deltas += e.delta));
    const final = await stream.finalResponse();
    return { deltas, text: final.output_text, status: final.status };
  },
  "tool-loop": () => toolLoop((input) => client.responses.create({ model: "weather", input, tools })),
  "tool-loop-stream": () =>
    toolLoop((input) => client.responses.stream({ model: "weather", input, tools }).finalResponse()),
  "tool-loop-previous-response": async () => {
    const first = await client.responses.create({ model: "weather", input: "What is the weather in Paris?", tools });
    const call = first.output.find((i) => i.type === "function_call");
    const second = await client.responses.create({
      model: "weather",
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: '{"temperature":"22C"}' }],
      tools,
    });
    return { call: call.name, text: second.output_text };
  },
  failed: async () => {
    const r = await client.responses.create({ model: "broken", input: "Hello" });
    return { status: r.status, error: r.error, text: r.output.at(-1)?.content?.[0]?.text ?? null };
  },
  "stream-failed": async () => {
    const { types, final } = await collect(await client.responses.create({ model: "broken", input: "Hello", stream: true }));
    return { last: types.at(-1), status: final.status, error: final.error };
  },
  logprobs: async () => {
    const r = await client.responses.create({
      model: "chat",
      input: "Hello",
      include: ["message.output_text.logprobs"],
      top_logprobs: 2,
    });
    const message = r.output.find((i) => i.type === "message");
    return { text: r.output_text, logprobs: message.content[0].logprobs };
  },
  "stream-logprobs": async () => {
    const stream = await client.responses.create({
      model: "chat",
      input: "Hello",
      include: ["message.output_text.logprobs"],
      stream: true,
    });
    const entries = [];
    for await (const event of stream) if (event.type === "response.output_text.delta") entries.push(...event.logprobs);
    return { logprobs: entries };
  },
  "missing-reference": async () => {
    try {
      await client.responses.create({ model: "chat", input: [{ type: "item_reference", id: "msg_nowhere_0" }] });
      return { threw: false };
    } catch (e) {
      return { threw: true, status: e.status, param: e.param, message: e.message };
    }
  },
};

const name = process.argv[2];
if (!(name in cases)) {
  console.error(`unknown case ${name}; one of ${Object.keys(cases).join(", ")}`);
  process.exit(2);
}
console.log(JSON.stringify(await cases[name]()));
