// The Vercel AI SDK as an application uses it, pointed at Duet: `streamText` with one tool whose
// `execute` runs in this process and returns FORECAST, and a step limit that lets the SDK run the
// tool loop itself.
// Prints on stdout, as one JSON object, what the SDK saw. Run by tests/clients/test_ai_sdk.py:
//   node tests/ai_sdk_client.mjs MODULES_DIR BASE_URL API_KEY MODEL openai|anthropic PROMPT FORECAST [HANG_UP_ON]
// MODULES_DIR is where scripts/ensure-ai-sdk installed the packages (ESM resolves bare names only
// from the importing file's own folders, so they are required from there: their CommonJS builds).
// HANG_UP_ON, a stream part type: the application aborts the stream when the first such part comes.
import { createRequire } from "node:module";
import { join } from "node:path";

const [modules, baseURL, apiKey, model, provider, prompt, forecast, hangUpOn] = process.argv.slice(2);
const load = createRequire(join(modules, "node_modules", "package.json"));
const { streamText, tool, stepCountIs, APICallError } = load("ai");
const { z } = load("zod");

function languageModel() {
  if (provider === "openai") {
    // The Responses API (`/v1/responses`), which is also the provider's default.
    return load("@ai-sdk/openai").createOpenAI({ baseURL: `${baseURL}/v1`, apiKey }).responses(model);
  }
  if (provider === "anthropic") {
    return load("@ai-sdk/anthropic").createAnthropic({ baseURL: `${baseURL}/v1`, apiKey })(model);
  }
  throw new Error(`unknown provider ${provider}`);
}

// The SDK's warnings (e.g. a setting the provider ignored) go into the report, not onto stdout.
const warnings = [];
globalThis.AI_SDK_LOG_WARNINGS = ({ warnings: some }) => warnings.push(...some);

const executed = [];
const getWeather = tool({
  description: "The current weather in a city.",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    executed.push(city);
    return forecast; // a fixed value: the test finds it in what the answer model was sent
  },
});

function describeError(error) {
  if (APICallError.isInstance(error)) {
    return { name: error.name, statusCode: error.statusCode, isRetryable: error.isRetryable, message: error.message,
             responseBody: error.responseBody };
  }
  if (error instanceof Error) return { name: error.name, message: error.message };
  return { value: error }; // an error event's payload, as the provider passed it on
}

const hangUp = new AbortController();
const result = streamText({
  model: languageModel(),
  prompt,
  tools: { get_weather: getWeather },
  stopWhen: stepCountIs(3),
  maxRetries: 0, // a fault shows at once
  abortSignal: AbortSignal.any([hangUp.signal, AbortSignal.timeout(60_000)]),
});

// What the stream itself delivered: also there when it ended in an error (then the result's promises reject).
const parts = [];
const errors = [];
let streamedText = "";
let streamFinishReason = null;
for await (const part of result.fullStream) {
  parts.push(part.type);
  if (part.type === "error") errors.push(describeError(part.error));
  if (part.type === "text-delta") streamedText += part.text;
  if (part.type === "finish") streamFinishReason = part.finishReason;
  if (part.type === hangUpOn) hangUp.abort();
}

const report = { parts, errors, executed, warnings, streamedText, streamFinishReason };
if (errors.length === 0 && !hangUp.signal.aborted) {
  const steps = await result.steps;
  Object.assign(report, {
    text: await result.text,
    finishReason: await result.finishReason,
    usage: await result.totalUsage,
    reasoning: steps.map((step) => step.reasoningText ?? null),
    steps: steps.map((step) => ({
      finishReason: step.finishReason,
      text: step.text,
      toolCalls: step.toolCalls.map(({ toolCallId, toolName, input }) => ({ toolCallId, toolName, input })),
      toolResults: step.toolResults.map(({ toolCallId, toolName, output }) => ({ toolCallId, toolName, output })),
    })),
  });
}
process.stdout.write(JSON.stringify(report) + "\n");
