// waitbound inbox: live updates over Server-Sent Events. The pages are complete
// without this file; it only keeps them current.
//
// In flight (table#in-flight): opens the EventSource of data-events (GET /events,
// same origin, the session cookie authenticates it), updates the row of the operation
// an event names (state, budget, next check), and reloads the rows from data-fragment
// (GET /in-flight?fragment=rows) when an operation it has no row for appears or one
// finishes.
// One operation (table#story-events): opens GET /operations/{id}/events, appends the
// story rows after the last one shown (rendered by the server), and reloads the page
// when the operation's outcome or decision request changes, or its stream ends.
// Every page: "in 4 s" and "12 min" texts tick each second.
(function () {
  "use strict";

  // The audit kinds (EventSource only delivers named events to their own listeners).
  var KINDS = [
    "created", "submitted", "reserved", "observed", "scheduled", "finished", "decided",
    "result_due", "errors_due", "cancel_requested", "cancel_answered",
    "extension_requested", "resumed", "answer_lost", "send_skipped", "late_answer",
    "webhook_received"
  ];
  var RELOAD_EVERY_MS = 3000;

  // A span for a person, as waitbound.web._views.duration writes it.
  function duration(seconds) {
    var total = Math.max(0, Math.round(seconds));
    if (total < 120) { return total + " s"; }
    var minutes = Math.floor(total / 60);
    if (minutes < 120) { return minutes + " min"; }
    var hours = Math.floor(minutes / 60);
    minutes = minutes % 60;
    if (hours < 48) { return minutes ? hours + " h " + minutes + " min" : hours + " h"; }
    var days = Math.floor(hours / 24);
    hours = hours % 24;
    return hours ? days + " d " + hours + " h" : days + " d";
  }

  function relative(iso) {
    var left = (Date.parse(iso) - Date.now()) / 1000;
    if (Math.abs(left) < 0.5) { return "now"; }
    return left > 0 ? "in " + duration(left) : duration(-left) + " ago";
  }

  // A <time data-t>'s text: "since" the time passed ("12 min"); "until" it
  // ("in 4 s", "12 min ago"); "due" as until, but "due 5 s ago" once it is past.
  function text(el) {
    if (el.dataset.t === "since") {
      return duration((Date.now() - Date.parse(el.dateTime)) / 1000);
    }
    var said = relative(el.dateTime);
    return el.dataset.t === "due" && / ago$/.test(said) ? "due " + said : said;
  }

  function tick() {
    document.querySelectorAll("time[data-t]").forEach(function (el) {
      el.textContent = text(el);
    });
  }

  function listen(source, handler) {
    KINDS.forEach(function (kind) { source.addEventListener(kind, handler); });
    source.onmessage = handler;
  }

  function parse(message) {
    try { return JSON.parse(message.data); } catch (e) { return null; }
  }

  function fetchHtml(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .catch(function () { return null; });
  }

  function stateText(value) {
    if (value === null || value === undefined) { return "none yet"; }
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function setText(row, selector, text) {
    var el = row.querySelector(selector);
    if (el) { el.textContent = text; }
  }

  function updateRow(row, data) {
    if ("state" in data) { setText(row, ".state", stateText(data.state)); }
    if (data.phase) { setText(row, ".phase", data.phase); }
    if (typeof data.requests_used === "number" && typeof data.max_requests === "number") {
      var bar = row.querySelector("progress");
      if (bar) {
        bar.max = data.max_requests;
        bar.value = data.requests_used;
        bar.textContent = data.requests_used + " of " + data.max_requests;
      }
      setText(row, ".used", data.requests_used + " of " + data.max_requests);
    }
    if ("next_poll_at" in data) {
      var cell = row.querySelector("[data-testid=next-check]");
      if (cell) {
        var time = cell.querySelector("time");
        if (data.next_poll_at) {
          if (!time) {
            time = document.createElement("time");
            time.dataset.t = "due";
            cell.insertBefore(time, cell.firstChild);
          }
          time.dateTime = data.next_poll_at;
          time.textContent = text(time);
        } else if (time) {
          time.remove();
        }
        setText(cell, ".source", data.delay_source || "now");
      }
    }
    row.classList.add("fresh");
    window.setTimeout(function () { row.classList.remove("fresh"); }, 1500);
  }

  function inFlight(table) {
    var tbody = table.tBodies[0];
    var status = document.querySelector("[data-testid=live-status]");
    var timer = null;
    var last = 0;

    function reloadRows() {
      if (timer !== null) { return; }
      var wait = Math.max(0, last + RELOAD_EVERY_MS - Date.now());
      timer = window.setTimeout(function () {
        fetchHtml(table.dataset.fragment).then(function (html) {
          timer = null;
          last = Date.now();
          if (html !== null) { tbody.innerHTML = html; tick(); }
        });
      }, wait);
    }

    function onEvent(message) {
      var event = parse(message);
      if (!event || typeof event.operation_id !== "string") { return; }
      var data = event.data || {};
      var row = null;
      tbody.querySelectorAll("tr[data-operation-id]").forEach(function (candidate) {
        if (candidate.dataset.operationId === event.operation_id) { row = candidate; }
      });
      if (event.kind === "finished" || data.outcome) {
        if (row) { row.remove(); }
        reloadRows();
      } else if (!row) {
        reloadRows();
      } else {
        updateRow(row, data);
      }
    }

    var source = new EventSource(table.dataset.events);
    listen(source, onEvent);
    source.onopen = function () {
      if (status) { status.textContent = "Live: rows update as things happen."; }
    };
    source.onerror = function () {
      if (status) { status.textContent = "Live updates paused; reconnecting…"; }
    };
  }

  function story(table) {
    var tbody = table.tBodies[0];
    var shown = parseInt(table.dataset.lastSeq || "0", 10);
    var busy = false;
    var again = false;

    function more() {
      if (busy) { again = true; return; }
      busy = true;
      fetchHtml(table.dataset.fragment + "&after=" + shown).then(function (html) {
        busy = false;
        if (html) {
          tbody.insertAdjacentHTML("beforeend", html);
          var rows = tbody.querySelectorAll("tr[data-seq]");
          if (rows.length) { shown = parseInt(rows[rows.length - 1].dataset.seq, 10); }
        }
        if (again) { again = false; more(); }
      });
    }

    function onEvent(message) {
      var event = parse(message);
      if (!event || typeof event.seq !== "number" || event.seq <= shown) { return; }
      var changes = ["finished", "decided", "extension_requested"].indexOf(event.kind) >= 0;
      if (changes && !document.querySelector("form.decide")) {
        window.location.reload();
        return;
      }
      more();
    }

    var source = new EventSource(table.dataset.events);
    listen(source, onEvent);
    source.addEventListener("end", function () {
      source.close();
      if (!document.querySelector("form.decide")) { window.location.reload(); }
    });
  }

  function start() {
    var flying = document.getElementById("in-flight");
    if (flying && flying.dataset.events) { inFlight(flying); }
    var events = document.getElementById("story-events");
    if (events && events.dataset.events) { story(events); }
    window.setInterval(tick, 1000);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
}());
