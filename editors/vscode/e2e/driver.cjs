// Drives headless Chromium on a code-server page for tests/editors/vscode_workbench.py: one JSON
// command per stdin line, one JSON answer per stdout line ({ok, value} or {ok: false, error}).
// Usage: node driver.cjs APP_DIR (APP_DIR/node_modules holds puppeteer-core).
//   {"op": "launch", "url": ..., "chromium": ..., "width": 1280, "height": 800}
//   {"op": "evaluate", "expression": "..."}       the expression's JSON value in the page
//   {"op": "type", "text": "...", "delay": 30}     keystrokes, as a person types
//   {"op": "press", "key": "Control+Shift+P"}      one chord ("+"-joined; "Plus" for the + key)
//   {"op": "screenshot", "path": "..."}            the whole page, PNG
//   {"op": "close"}

const path = require("path");
const readline = require("readline");

const puppeteer = require(path.join(process.argv[2], "node_modules", "puppeteer-core"));

let browser;
let page;

async function launch(cmd) {
  browser = await puppeteer.launch({
    executablePath: cmd.chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
  });
  page = await browser.newPage();
  await page.setViewport({ width: cmd.width ?? 1280, height: cmd.height ?? 800 });
  await page.goto(cmd.url, { waitUntil: "domcontentloaded", timeout: 120000 });
  await page.waitForSelector(".monaco-workbench", { timeout: 120000 });
  return true;
}

async function press(chord) {
  const keys = chord.split("+").map((key) => (key === "Plus" ? "+" : key));
  const modifiers = keys.slice(0, -1);
  for (const key of modifiers) {
    await page.keyboard.down(key);
  }
  await page.keyboard.press(keys[keys.length - 1]);
  for (const key of modifiers.reverse()) {
    await page.keyboard.up(key);
  }
  return true;
}

async function handle(cmd) {
  switch (cmd.op) {
    case "launch":
      return launch(cmd);
    case "evaluate":
      return page.evaluate(cmd.expression);
    case "type":
      await page.keyboard.type(cmd.text, { delay: cmd.delay ?? 30 });
      return true;
    case "press":
      return press(cmd.key);
    case "screenshot":
      await page.screenshot({ path: cmd.path });
      return cmd.path;
    case "close":
      if (browser) {
        await browser.close();
      }
      return true;
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const lines = readline.createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on("line", (line) => {
  queue = queue.then(async () => {
    let answer;
    try {
      answer = { ok: true, value: (await handle(JSON.parse(line))) ?? null };
    } catch (err) {
      answer = { ok: false, error: String(err && err.stack ? err.stack : err) };
    }
    process.stdout.write(JSON.stringify(answer) + "\n");
  });
});
lines.on("close", () => {
  queue.then(() => (browser ? browser.close() : undefined)).finally(() => process.exit(0));
});
