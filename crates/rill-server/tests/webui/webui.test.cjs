// rill's chat page (GET /) driven in headless Chromium against a real `rill serve`.
// Run through run.sh, or: RILL_BIN=target/debug/rill NODE_PATH=... node --test webui.test.cjs
// The model prints noise (random weights): the tests check structure, not wording.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const path = require("node:path");
const { chromium } = require("playwright-core");

const ROOT = path.resolve(__dirname, "../../../..");
// The model the page talks to (a trained one changes only this line).
const MODEL = process.env.RILL_WEBUI_MODEL || path.join(ROOT, "fixtures/models/qwen35moe.f32.gguf");
const BIN = process.env.RILL_BIN || path.join(ROOT, "target/debug/rill");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const OUT = path.join(process.env.CARGO_TARGET_DIR || path.join(ROOT, "target"), "webui");
const API_KEY = "sk-webui-test";
const TIMEOUT = 120_000;

let server, base, browser, page, serverLog = "";
const pageErrors = [], foreign = [];

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on("error", reject);
  });
}

async function startServer(extra) {
  const port = await freePort();
  const args = ["serve", "-m", MODEL, "--host", "127.0.0.1", "--port", String(port),
    "--parallel", "2", "--ctx-size", "4096", "-t", "1", "--alias", "webui-model", ...extra];
  const proc = spawn(BIN, args, { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  proc.stdout.on("data", (d) => { log += d; });
  proc.stderr.on("data", (d) => { log += d; });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const r = await fetch(url + "/health");
      if (r.ok) break;
    } catch (_) {}
    if (proc.exitCode !== null || Date.now() > deadline) {
      proc.kill("SIGKILL");
      throw new Error("rill serve did not start:\n" + log);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { proc, url, log: () => log };
}

async function stopServer(s) {
  if (!s || s.proc.exitCode !== null) return s ? s.proc.exitCode : 0;
  const exited = new Promise((r) => s.proc.on("exit", (code) => r(code)));
  s.proc.kill("SIGTERM");
  return exited;
}

async function metric(name) {
  const text = await (await fetch(base + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : NaN;
}

const lastReply = () => page.locator("#messages .msg.assistant").last();

// Wait until the last reply leaves "streaming"; return its parts.
async function finished() {
  const m = lastReply();
  await page.waitForFunction(() => {
    const all = document.querySelectorAll("#messages .msg.assistant");
    const m = all[all.length - 1];
    return m && m.dataset.status !== "streaming";
  }, null, { timeout: TIMEOUT });
  return {
    status: await m.getAttribute("data-status"),
    thinking: await m.locator(".thinking-text").textContent(),
    thinkingShown: await m.locator(".thinking").isVisible(),
    answer: await m.locator(".answer").textContent(),
    error: await m.locator(".error").textContent(),
    stats: (await m.locator(".stats span").allTextContents()).join(" · "),
  };
}

async function setSettings(values) {
  await page.click("#toggle-settings");
  for (const [k, v] of Object.entries(values)) {
    if (typeof v === "boolean") await page.setChecked("#" + k, v);
    else await page.fill("#" + k, String(v));
    await page.dispatchEvent("#" + k, "change");
  }
  await page.click("#close-settings");
}

async function say(text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
}

before(async () => {
  fs.mkdirSync(OUT, { recursive: true });
  server = await startServer(["--api-key", API_KEY]);
  base = server.url;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
  page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("request", (r) => { if (!r.url().startsWith(base + "/")) foreign.push(r.url()); });
  // A random model may end a reply at any token: the page's requests go out
  // with the server's `ignore_eos` added, so replies run to max_tokens (the
  // tests read the page's own request body before this).
  await page.route(base + "/v1/chat/completions", (route) => {
    const body = JSON.parse(route.request().postData());
    route.continue({ postData: JSON.stringify({ ...body, ignore_eos: true }) });
  });
});

after(async () => {
  if (browser) await browser.close();
  const code = await stopServer(server);
  serverLog = server ? server.log() : "";
  assert.equal(code, 0, "rill serve exited with " + code + ":\n" + serverLog);
});

test("the page loads, asks for the API key, and asks again when it is refused", async () => {
  const resp = await page.goto(base + "/");
  assert.equal(resp.status(), 200);
  assert.match(resp.headers()["content-type"], /text\/html/);
  assert.equal(await page.title(), "rill");
  // /v1/models answers 401 without a key: the key dialog opens.
  await page.waitForSelector("#key-dialog[open]");
  await page.fill("#api-key", "wrong-key");
  await page.click("#key-save");
  // Refused: asked again, saying so.
  await page.waitForFunction(() => document.querySelector("#key-dialog").open &&
    /refused/.test(document.querySelector("#key-reason").textContent));
  await page.fill("#api-key", API_KEY);
  await page.click("#key-save");
  await page.waitForFunction(() => document.querySelector("#model").textContent === "webui-model");
  assert.equal(await page.evaluate(() => localStorage.getItem("rill.apiKey")), API_KEY);
  assert.equal(await page.textContent("#send"), "Send");
});

test("with thinking on, the streamed text lands in the thinking panel", async () => {
  await setSettings({ thinking: true, max_tokens: 12, temperature: 0.7 });
  // Watch the request the page sends.
  const sent = page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions"));
  await say("Hello there, what is a river?");
  const body = JSON.parse((await sent).postData());
  assert.equal(body.stream, true);
  assert.deepEqual(body.stream_options, { include_usage: true });
  assert.deepEqual(body.chat_template_kwargs, { enable_thinking: true });
  assert.equal(body.max_tokens, 12);
  assert.equal(body.temperature, 0.7);
  assert.equal(body.messages.at(-1).content, "Hello there, what is a river?");
  const r = await finished();
  assert.equal(r.status, "done", r.error);
  assert.ok(r.thinking.length > 0, "thinking text shown");
  assert.ok(r.thinkingShown, "thinking panel visible");
  assert.equal(r.answer, "", "the template opened <think>: nothing reached the answer");
  assert.match(r.stats, /stopped at max_tokens/);
  assert.match(r.stats, / 12 tokens/);
  assert.match(r.stats, /\d+ of \d+ prompt tokens from cache/);
  assert.match(r.stats, /first token \d+ ms/);
  assert.match(r.stats, /tok\/s/);
  // The thinking panel folds.
  await lastReply().locator(".thinking > summary").click();
  assert.equal(await lastReply().locator(".thinking").getAttribute("open"), null);
});

test("with thinking off, a second turn streams into the answer and reuses the prompt cache", async () => {
  await setSettings({ thinking: false, max_tokens: 16 });
  const sent = page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions"));
  await say("And a second question?");
  const body = JSON.parse((await sent).postData());
  assert.deepEqual(body.chat_template_kwargs, { enable_thinking: false });
  // Multi-turn: the first exchange is sent again.
  assert.deepEqual(body.messages.map((m) => m.role), ["user", "assistant", "user"]);
  assert.ok(body.messages[1].reasoning_content.length > 0);
  const r = await finished();
  assert.equal(r.status, "done", r.error);
  assert.ok(r.answer.length > 0, "answer text shown");
  assert.match(r.stats, / 16 tokens/);
  assert.equal(r.thinking, "");
  assert.equal(r.thinkingShown, false, "no thinking panel without thinking");
  const m = r.stats.match(/(\d+) of (\d+) prompt tokens from cache/);
  assert.ok(m, r.stats);
  assert.ok(Number(m[1]) > 0, "the first turn's prompt came from the cache: " + r.stats);
  assert.equal(await page.locator("#messages .msg").count(), 4);
});

test("stop ends the request and the button returns to Send", async () => {
  await setSettings({ thinking: true, max_tokens: 3000 });
  const disconnectedBefore = await metric("rill_http_streams_disconnected_total");
  await say("Write a very long story.");
  await page.waitForFunction(() => document.querySelector("#send").dataset.state === "busy");
  assert.equal(await page.textContent("#send"), "Stop");
  // Some text streams in, then stop.
  await page.waitForFunction(() => {
    const all = document.querySelectorAll("#messages .msg.assistant");
    return all[all.length - 1].querySelector(".thinking-text").textContent.length > 0;
  });
  await page.click("#send");
  const r = await finished();
  assert.equal(r.status, "stopped");
  assert.equal(await page.textContent("#send"), "Send");
  assert.equal(await page.getAttribute("#send", "data-state"), "idle");
  // The server saw the client leave and cancelled the sequence.
  const deadline = Date.now() + 30_000;
  while ((await metric("rill_http_streams_disconnected_total")) <= disconnectedBefore) {
    assert.ok(Date.now() < deadline, "the server did not see the stream end");
    await new Promise((res) => setTimeout(res, 200));
  }
  while ((await metric("rill_requests_running")) !== 0) {
    assert.ok(Date.now() < deadline, "the cancelled sequence is still running");
    await new Promise((res) => setTimeout(res, 200));
  }
  // The page is usable again: a short reply after the stop.
  await setSettings({ thinking: false, max_tokens: 4 });
  await say("Short one.");
  const again = await finished();
  assert.equal(again.status, "done", again.error);
});

test("a canned stream: thinking, then an answer with a code block and a tool call", async () => {
  // What a trained model would send, through the page's parser and renderer.
  const chunks = [
    { choices: [{ index: 0, delta: { role: "assistant", content: "" } }] },
    { choices: [{ index: 0, delta: { reasoning_content: "Let me think.", reasoning: "Let me think." } }] },
    { choices: [{ index: 0, delta: { reasoning: " Still thinking." } }] },
    { choices: [{ index: 0, delta: { content: "Here:\n```py\nprint(1)\n" } }] },
    { choices: [{ index: 0, delta: { content: "```\nDone <b>not bold</b>" } }] },
    { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_1", type: "function",
      function: { name: "get_time", arguments: "{\"tz\":\"CET\"}" } }] } }] },
    { choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
    { choices: [], usage: { prompt_tokens: 50, completion_tokens: 20, total_tokens: 70,
      prompt_tokens_details: { cached_tokens: 40 } },
      timings: { cache_n: 40, prompt_n: 10, prompt_ms: 12, predicted_n: 20, predicted_ms: 400,
        predicted_per_second: 47.5 } },
  ];
  const sse = chunks.map((c) => "data: " + JSON.stringify(c) + "\n\n").join("") + "data: [DONE]\n\n";
  const url = base + "/v1/chat/completions";
  const canned = (route) => route.fulfill({
    status: 200, headers: { "content-type": "text/event-stream" }, body: sse,
  });
  await page.route(url, canned);
  try {
    await say("Canned, please.");
    const r = await finished();
    assert.equal(r.status, "done", r.error);
    assert.equal(r.thinking, "Let me think. Still thinking.", "reasoning_content or reasoning");
    const m = lastReply();
    assert.equal(await m.locator(".thinking").getAttribute("open"), null, "folded once the answer began");
    assert.match(await m.locator(".thinking > summary").textContent(), /^Thought for/);
    const code = m.locator(".answer pre code");
    assert.equal(await code.count(), 1);
    assert.equal(await code.textContent(), "print(1)");
    assert.equal(await code.getAttribute("data-lang"), "py");
    assert.equal(await m.locator(".answer b").count(), 0, "model text is never HTML");
    assert.match(r.answer, /Done <b>not bold<\/b>/);
    assert.match(r.answer, /→ get_time\(\{"tz":"CET"\}\)/);
    assert.equal(r.stats, "47.5 tok/s · first token 12 ms · 20 tokens · 40 of 50 prompt tokens from cache");
  } finally {
    await page.unroute(url, canned);
  }
});

test("a screenshot, and the page fits a narrow screen", async () => {
  // Open the thinking panels for the picture.
  await page.evaluate(() => document.querySelectorAll(".thinking").forEach((d) => { d.open = true; }));
  // The conversation scrolls inside <main>: make the window tall enough for all of it.
  const height = await page.evaluate(() => document.querySelector("#chat").scrollHeight +
    document.querySelector("header").offsetHeight + document.querySelector("#composer").offsetHeight);
  await page.setViewportSize({ width: 1100, height: Math.min(height + 4, 4000) });
  await page.screenshot({ path: path.join(OUT, "screenshot.png") });
  assert.ok(fs.statSync(path.join(OUT, "screenshot.png")).size > 1000);
  await page.setViewportSize({ width: 380, height: 740 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, "horizontal overflow of " + overflow + " px at 380 px");
  const send = await page.locator("#send").boundingBox();
  assert.ok(send && send.x + send.width <= 380, "the send button is on screen");
  await page.screenshot({ path: path.join(OUT, "screenshot-narrow.png") });
});

test("settings and the key survive a reload; New chat clears the conversation", async () => {
  await page.setViewportSize({ width: 1100, height: 800 });
  await page.reload();
  await page.waitForFunction(() => document.querySelector("#model").textContent === "webui-model");
  assert.equal(await page.evaluate(() => document.querySelector("#key-dialog").open), false);
  assert.equal(await page.isChecked("#thinking"), false);
  assert.equal(await page.inputValue("#max_tokens"), "4");
  await setSettings({ system: "You are a test." });
  const sent = page.waitForRequest((r) => r.url().endsWith("/v1/chat/completions"));
  await say("One more.");
  const body = JSON.parse((await sent).postData());
  // A fresh page: only the system prompt and this message.
  assert.deepEqual(body.messages, [
    { role: "system", content: "You are a test." },
    { role: "user", content: "One more." },
  ]);
  assert.equal((await finished()).status, "done");
  await page.click("#new-chat");
  assert.equal(await page.locator("#messages .msg").count(), 0);
  assert.ok(await page.isVisible("#empty"));
});

test("no script errors and no request leaves the server", async () => {
  assert.deepEqual(pageErrors, []);
  assert.deepEqual(foreign, []);
});

test("--no-webui: / is a JSON 404", async () => {
  const s = await startServer(["--no-webui"]);
  try {
    const r = await fetch(s.url + "/");
    assert.equal(r.status, 404);
    const j = await r.json();
    assert.equal(j.error.code, "not_found");
    assert.equal((await fetch(s.url + "/v1/models")).status, 200);
    assert.match(s.log(), /chat page: off/);
  } finally {
    assert.equal(await stopServer(s), 0);
  }
  // The server with the page says where it is.
  assert.match(server.log(), new RegExp("chat page: " + base.replace(/[.]/g, "\\.") + "/"));
  assert.match(server.log(), /OpenAI API base URL: http:\/\/127\.0\.0\.1:\d+\/v1/);
});
