// The official MCP Tasks requester (@modelcontextprotocol/ext-tasks) driving
// `waitbound mcp` for the tests: one JSON command per stdin line, one JSON reply per
// stdout line (tagged with the command's "cid"; commands run concurrently).
//
// The requester talks to the server through a ConnectedMcpSessionPort of its own
// (the package's documented seam, `withTasks(port)`): JSON-RPC lines over the
// server's stdio, or single-exchange POSTs over streamable HTTP, each request framed
// with the 2026-07-28 per-request envelope. Every request and answer is kept in a
// transcript the tests read.
import { spawn } from "node:child_process";
import readline from "node:readline";
import { withTasks } from "@modelcontextprotocol/ext-tasks/client";

const VERSION = "2026-07-28";
const TASKS = "io.modelcontextprotocol/tasks";
const CAPS = "io.modelcontextprotocol/clientCapabilities";
const CLIENT_INFO = { name: "ext-tasks-requester", version: "0.2.2" };
const NAME_KEYS = { "tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId" };

let transcript = [];
let link = null;
let session = null;
let answer = null; // the elicitation answer the input handler gives
let answered = null; // resolves the handlers waiting for one
let configured = new Promise((resolve) => (answered = resolve));
const executions = new Map();
const heard = []; // what subscriptions/listen streams delivered (HTTP)
const listening = new Set();
let nextId = 1;

function out(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

function framed(params, declare) {
  const meta = { ...(params?._meta ?? {}) };
  const caps = { ...(meta[CAPS] ?? {}) };
  const extensions = { ...(caps.extensions ?? {}) };
  if (declare === true) extensions[TASKS] = {};
  if (declare === false) delete extensions[TASKS];
  caps.extensions = extensions;
  meta["io.modelcontextprotocol/protocolVersion"] = VERSION;
  meta["io.modelcontextprotocol/clientInfo"] = CLIENT_INFO;
  meta[CAPS] = caps;
  return { ...(params ?? {}), _meta: meta };
}

class StdioLink {
  constructor(argv, env) {
    this.child = spawn(argv[0], argv.slice(1), { env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "inherit"] });
    this.pending = new Map();
    this.listeners = new Set();
    readline.createInterface({ input: this.child.stdout }).on("line", (line) => {
      let message;
      try {
        message = JSON.parse(line);
      } catch {
        return;
      }
      if (message.id !== undefined && this.pending.has(message.id)) {
        this.pending.get(message.id)(message);
        this.pending.delete(message.id);
      } else if (message.method !== undefined && message.id === undefined) {
        for (const listener of this.listeners) listener(message);
      }
    });
    this.child.on("exit", () => {
      for (const [id, resolve] of this.pending) resolve({ jsonrpc: "2.0", id, error: { code: -32000, message: "server exited" } });
      this.pending.clear();
    });
  }
  send(message) {
    return new Promise((resolve) => {
      this.pending.set(message.id, resolve);
      this.child.stdin.write(JSON.stringify(message) + "\n");
    });
  }
  close() {
    this.child.kill();
  }
}

class HttpLink {
  constructor(url, headers) {
    this.url = url;
    this.headers = headers ?? {};
    this.listeners = new Set();
  }
  async send(message, headers) {
    const key = NAME_KEYS[message.method];
    const name = key === undefined ? undefined : message.params?.[key];
    let response;
    try {
      response = await fetch(this.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          "mcp-protocol-version": VERSION,
          "mcp-method": message.method,
          ...(typeof name === "string" ? { "mcp-name": name } : {}),
          ...this.headers,
          ...(headers ?? {}),
        },
        body: JSON.stringify(message),
      });
    } catch (error) {
      return { jsonrpc: "2.0", id: message.id, error: { code: -32000, message: `unreachable: ${error.cause?.code ?? error}` } };
    }
    const text = await response.text();
    if ((response.headers.get("content-type") ?? "").includes("text/event-stream")) {
      let found = null;
      for (const block of text.split(/\r?\n\r?\n/)) {
        const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
        if (!data) continue;
        const parsed = JSON.parse(data);
        if (parsed.id === message.id) found = parsed;
        else if (parsed.method) for (const listener of this.listeners) listener(parsed);
      }
      return found ?? { jsonrpc: "2.0", id: message.id, error: { code: -32000, message: "no answer in the stream" } };
    }
    try {
      return JSON.parse(text);
    } catch {
      return { jsonrpc: "2.0", id: message.id, error: { code: -32000, message: `HTTP ${response.status}` } };
    }
  }
  close() {}
}

async function exchange(method, params, declare, headers) {
  const message = { jsonrpc: "2.0", id: nextId++, method, params: framed(params, declare) };
  transcript.push({ request: message });
  const reply = await link.send(message, headers);
  transcript.push({ response: reply });
  return reply;
}

function port() {
  return {
    endpointId: "waitbound-mcp-test",
    taskCapabilities: { generation: "v2", capabilities: {} },
    invalidated: false,
    async dispatch(request, options) {
      const reply = await exchange(request.method, request.params, undefined, options?.context?.headers);
      return reply.error !== undefined ? { kind: "error", error: reply.error } : { kind: "result", result: reply.result };
    },
    onServerRequest() {
      return () => {};
    },
    onNotification(listener) {
      link.listeners.add(listener);
      return () => link.listeners.delete(listener);
    },
    onInvalidated() {
      return () => {};
    },
  };
}

function failure(error) {
  return { name: error?.constructor?.name ?? "Error", message: String(error?.message ?? error), code: error?.code, data: error?.data };
}

function outcomeJson(outcome) {
  if (outcome.status === "completed") return { status: "completed", result: outcome.result, task: outcome.task?.raw };
  if (outcome.status === "failed") return { status: "failed", error: failure(outcome.error), task: outcome.task?.raw };
  return { status: outcome.status, task: outcome.task?.raw };
}

const commands = {
  async connect(c) {
    link = c.transport === "stdio" ? new StdioLink(c.argv, c.env ?? {}) : new HttpLink(c.url, c.headers);
    session = withTasks(port(), {
      onInputRequest: async (request) => {
        if (request.kind !== "elicitation") throw new Error(`unexpected input request ${request.kind}`);
        transcript.push({ elicitation: request.params });
        while (answer === null) await configured; // no answer yet: the task waits for one
        return answer;
      },
      onError: (error) => transcript.push({ background_error: failure(error) }),
    });
    return true;
  },
  async configure(c) {
    answer = c.answer ?? null;
    const wake = answered;
    configured = new Promise((resolve) => (answered = resolve));
    wake();
    return true;
  },
  async call(c) {
    const execution = await session.callTool(c.name, c.arguments ?? {});
    if (execution.kind === "task") {
      executions.set(execution.handle.taskId, execution);
      return { kind: "task", taskId: execution.handle.taskId };
    }
    return { kind: "immediate", outcome: outcomeJson(await execution.result()) };
  },
  async settle(c) {
    const { outcome } = await executions.get(c.taskId).settle({ close: false });
    return outcomeJson(outcome);
  },
  async resume(c) {
    return outcomeJson(await session.task(c.taskId).result());
  },
  async snapshot(c) {
    return (await session.task(c.taskId).snapshot()).raw;
  },
  async cancel(c) {
    await session.task(c.taskId).cancel();
    return true;
  },
  async update(c) {
    await session.task(c.taskId).updateJson(c.inputResponses);
    return true;
  },
  async raw(c) {
    return await exchange(c.method, c.params ?? {}, c.declare, c.headers);
  },
  async listen(c) {
    // subscriptions/listen over streamable HTTP: the response is an SSE stream kept open
    const message = { jsonrpc: "2.0", id: nextId++, method: "subscriptions/listen", params: framed({ notifications: c.notifications }, c.declare) };
    const controller = new AbortController();
    listening.add(controller);
    const response = await fetch(link.url, {
      method: "POST",
      signal: controller.signal,
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
        "mcp-method": message.method,
        ...link.headers,
      },
      body: JSON.stringify(message),
    });
    if (!(response.headers.get("content-type") ?? "").includes("text/event-stream")) {
      listening.delete(controller);
      return { response: await response.json() };
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
            const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
            if (data) heard.push(JSON.parse(data));
          }
        }
      } catch {
        // aborted by unlisten or disconnect
      }
    })();
    return { streaming: true };
  },
  async heard() {
    return heard;
  },
  async transcript() {
    const kept = transcript;
    transcript = [];
    return kept;
  },
  async disconnect() {
    for (const controller of listening) controller.abort();
    listening.clear();
    link?.close();
    for (const execution of executions.values()) await execution.detach().catch(() => {});
    executions.clear();
    link = null;
    session = null;
    return true;
  },
};

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  const command = JSON.parse(line);
  Promise.resolve()
    .then(() => commands[command.cmd](command))
    .then(
      (value) => out({ cid: command.cid, ok: true, value }),
      (error) => out({ cid: command.cid, ok: false, error: failure(error) }),
    );
}).on("close", () => {
  link?.close();
  process.exit(0);
});
