// The status page's script: asks /api/status every two seconds and shows
// what it says. Every value is put in the page as text, never as markup:
// keys and session names are whatever clients chose.
"use strict";

const REFRESH_MS = 2000;

// A token given as #token=... is moved out of the address bar (and out of
// history) into this tab's storage; the server never sees the fragment.
(function takeTokenFromFragment() {
  const match = /^#token=(.+)$/.exec(window.location.hash);
  if (match) {
    sessionStorage.setItem("leasehold-token", decodeURIComponent(match[1]));
    history.replaceState(null, "", window.location.pathname);
  }
})();

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function forPeople(ms) {
  if (ms === null || ms === undefined) return "?";
  const s = Math.floor(ms / 1000);
  if (ms < 1000) return ms + "ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
  if (ms < 3600000) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  if (ms < 86400000) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d" + String(Math.floor((s % 86400) / 3600)).padStart(2, "0") + "h";
}

function bytes(n) {
  if (n === null || n === undefined) return "- (in memory, or a cell's members keep it)";
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let size = n / 1024, unit = 0;
  while (size >= 1024 && unit < units.length - 1) { size /= 1024; unit++; }
  return size.toFixed(1) + " " + units[unit];
}

function named(who) {
  return who.name ? who.name : who.session;
}

function fillTable(id, rows, makeRow, error) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows.flatMap(makeRow));
  const empty = document.getElementById(id + "-empty");
  if (!empty.dataset.text) empty.dataset.text = empty.textContent;
  empty.textContent = error ? "Not shown: " + error : empty.dataset.text;
  empty.hidden = rows.length > 0 && !error;
  document.getElementById(id).hidden = rows.length === 0;
}

function row(cells) {
  const tr = el("tr");
  for (const cell of cells) tr.append(cell instanceof Node ? cell : el("td", cell));
  return tr;
}

function showMaster(m) {
  const ended = Object.entries(m.recently_ended).map(([cause, n]) => n + " " + cause).join(", ");
  const items = [
    ["Version", m.version],
    ["Epoch", m.epoch],
    ["Index", m.index],
    ["Sessions", m.sessions + " (" + m.keepalives_held + " keeping alive now); recently ended: " + ended],
    ["Nodes", m.nodes],
    ["Locks", m.locks_held + " held (" + m.holdings + " holdings), " + m.waiters + " waiting, " + m.locks_in_delay + " in lock-delay"],
    ["Checks", m.checks],
    ["Access control", m.access_control ? "on" : "off"],
    ["Stored", bytes(m.stored_bytes)],
  ];
  document.getElementById("master").replaceChildren(
    ...items.flatMap(([term, value]) => [el("dt", term), el("dd", value)]));
}

function showLocks(locks, more, total, error) {
  document.getElementById("locks-count").textContent =
    total + " held" + (more ? "; the first " + locks.length + " listed" : "");
  fillTable("locks", locks, (lock) => {
    const waiters = lock.waiters.map(named).join(", ") +
      (lock.waiters_total > lock.waiters.length ? " and " + (lock.waiters_total - lock.waiters.length) + " more" : "");
    const delay = lock.delay_remaining_ms === null ? el("td", "-") : el("td", forPeople(lock.delay_remaining_ms), "delay");
    if (lock.holders.length === 0) {
      return [row([lock.key, "-", "nobody", lock.lock_generation, "-", waiters || "-", delay])];
    }
    const rows = lock.holders.map((h) => {
      const holder = el("td");
      holder.append(el("div", h.name || "(not yours to see)"), el("div", h.session, "id"));
      return row([lock.key, h.mode, holder, lock.lock_generation, forPeople(h.held_ms), waiters || "-", delay.cloneNode(true)]);
    });
    const more = lock.holders_total - lock.holders.length;
    if (more > 0) rows.push(row([lock.key, "shared", "and " + more + " more holders", "", "", "", ""]));
    return rows;
  }, error);
}

function showSessions(sessions, more, total) {
  document.getElementById("sessions-count").textContent =
    total + " live" + (more ? "; the first " + sessions.length + " listed" : "");
  fillTable("sessions", sessions, (s) => [row([
    s.name,
    el("td", s.session, "id"),
    s.keepalive_held ? "kept alive" : "not heard from",
    forPeople(s.lease_remaining_ms),
    forPeople(s.lease_ms),
    forPeople(s.lock_delay_ms),
    s.checks.join(", ") || "-",
  ])]);
}

function showChecks(checks, more, error) {
  document.getElementById("checks-count").textContent =
    checks.length + (more ? "+" : "");
  fillTable("checks", checks, (c) => [row([c.name, el("td", c.status, c.status), c.note, c.sessions])], error);
}

// What a cell's member says of itself and its cell (cell status).
function showCell(c) {
  const section = document.getElementById("cell-section");
  section.hidden = !c;
  if (!c) return;
  document.getElementById("cell-name").textContent = c.cell;
  const leader = c.leader === null ? "none known" : "member " + c.leader + " (" + (c.members[c.leader] || "?") + ")";
  const items = [
    ["This member", c.id + ", " + c.role + (c.master ? ", serving as the master" : "")],
    ["Leader", leader],
    ["Epoch", c.epoch],
    ["Term", c.term],
    ["Last entry of its log", c.last_log === null ? "-" : c.last_log],
    ["Last entry applied", c.applied === null ? "-" : c.applied],
  ];
  document.getElementById("cell").replaceChildren(
    ...items.flatMap(([term, value]) => [el("dt", term), el("dd", value)]));
  const body = document.querySelector("#members tbody");
  body.replaceChildren(...Object.entries(c.members).map(([id, addr]) => {
    const n = Number(id);
    const role = n === c.leader ? "leader" : (n === c.id ? c.role : "");
    const lag = c.lag[id] === undefined ? (n === c.leader ? "0" : "-") : String(c.lag[id]);
    return row([id, addr, c.voters.includes(n) ? "yes" : "learner", role, lag]);
  }));
}

function problem(text) {
  const box = document.getElementById("problem");
  box.textContent = text || "";
  box.hidden = !text;
}

async function refresh() {
  const token = sessionStorage.getItem("leasehold-token");
  const headers = token ? { Authorization: "Bearer " + token } : {};
  try {
    const response = await fetch("/api/status", { headers, cache: "no-store" });
    if (response.status === 401) {
      problem("Access control is on: " + (await response.text()).trim());
      document.getElementById("login").hidden = false;
      return;
    }
    if (!response.ok) {
      problem("The master did not answer: " + (await response.text()).trim());
      return;
    }
    const status = await response.json();
    problem(null);
    document.getElementById("login").hidden = true;
    showCell(status.cell);
    const serving = status.master !== null;
    document.getElementById("master-section").hidden = !serving;
    for (const section of document.querySelectorAll("section.data")) section.hidden = !serving;
    if (!serving) {
      const c = status.cell;
      problem("This member does not serve as the master" +
        (c && c.leader !== null ? ": member " + c.leader + " leads; its own HTTP port's page shows the sessions and locks" : "") + ".");
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
      return;
    }
    const who = status.identity;
    document.getElementById("who").textContent =
      who.principal ? "as " + who.principal : (who.via === "operator" ? "as the operator" : "");
    showMaster(status.master);
    showLocks(status.locks, status.more_locks, status.master.locks_held, status.locks_error);
    showSessions(status.sessions, status.more_sessions, status.master.sessions);
    showChecks(status.checks, status.more_checks, status.checks_error);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    problem("Cannot reach the master: " + error);
  }
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("leasehold-token", document.getElementById("token").value);
  refresh();
});

refresh();
setInterval(refresh, REFRESH_MS);
