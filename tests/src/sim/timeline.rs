//! A run drawn as an SVG timeline: the master's lane first (up under each
//! epoch, down after a crash), then one lane per host, its session state
//! as the lane's colour, its lock holdings as bars named by lock and
//! generation, its fenced writes as ticks (rejected ones in red), the
//! faults that hit it hatched across it, and master crashes across every
//! lane, on an axis of virtual seconds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::check::Report;
use super::record::Run;
use super::trace::{is_server, What};

const LEFT: f64 = 90.0;
const WIDTH: f64 = 1400.0;
const LANE: f64 = 34.0;
const TOP: f64 = 86.0;

fn colour(state: &str) -> &'static str {
    match state {
        "normal" => "#cdeccd",
        "jeopardy" => "#ffd280",
        "safe" => "#8fc8ff",
        "failover" => "#c9a0ff",
        "expired" => "#f3a0a0",
        "closed" => "#d0d0d0",
        _ => "#f4f4f4",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The SVG for `run`, with `report`'s verdict in the title.
pub fn svg(run: &Run, report: &Report) -> String {
    let end = run.end.max(1) as f64;
    let x = |at: u64| LEFT + (at as f64 / end) * (WIDTH - LEFT - 20.0);
    // A cell's members have lanes of their own; a single master always has
    // one, even in a run that never touches it.
    let cell = run
        .entries
        .iter()
        .any(|e| is_server(&e.who) && e.who != "master");
    let mut lanes: Vec<String> = if cell {
        Vec::new()
    } else {
        vec!["master".to_string()]
    };
    for e in &run.entries {
        let lane = match &e.what {
            What::Write { .. } | What::Invoke { .. } | What::Complete { .. }
                if e.who == "final" =>
            {
                continue
            }
            What::RunStarted { .. }
            | What::RunEnded { .. }
            | What::Configured { .. }
            | What::Configuration { .. } => continue,
            _ => &e.who,
        };
        if !lanes.contains(lane) {
            lanes.push(lane.clone());
        }
    }
    lanes.sort_by_key(|l| {
        (
            !is_server(l),
            l.starts_with('w') || l == "watch",
            l.len(),
            l.clone(),
        )
    });
    let lane_of: BTreeMap<&str, usize> = lanes
        .iter()
        .enumerate()
        .map(|(i, l)| (l.as_str(), i))
        .collect();
    let y = |lane: usize| TOP + lane as f64 * LANE;
    let height = TOP + lanes.len() as f64 * LANE + 40.0;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="monospace" font-size="11">
<defs><pattern id="cut" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#555" fill-opacity="0.45"/></pattern></defs>
<rect width="100%" height="100%" fill="white"/>"##
    );
    let verdict = if report.passed() {
        "all invariants hold".to_string()
    } else {
        format!("{} VIOLATIONS", report.violations.len())
    };
    let _ = writeln!(
        out,
        r#"<text x="10" y="18" font-size="14">{} seed {}: {}</text>"#,
        run.scenario, run.seed, verdict
    );
    let legend = [
        ("normal", colour("normal")),
        ("jeopardy", colour("jeopardy")),
        ("safe", colour("safe")),
        ("failover", colour("failover")),
        ("expired", colour("expired")),
        ("closed", colour("closed")),
    ];
    for (i, (name, fill)) in legend.iter().enumerate() {
        let lx = 10.0 + i as f64 * 110.0;
        let _ = writeln!(
            out,
            r#"<rect x="{lx}" y="28" width="14" height="10" fill="{fill}"/><text x="{}" y="37">{name}</text>"#,
            lx + 18.0
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="10" y="50" width="20" height="6" fill="#223"/><text x="35" y="57">holds lock:generation</text><rect x="210" y="46" width="14" height="10" fill="url(#cut)"/><text x="228" y="55">cut off / held</text><line x1="340" y1="46" x2="340" y2="58" stroke="#080"/><text x="345" y="55">write ok</text><line x1="420" y1="46" x2="420" y2="58" stroke="#d00" stroke-width="2"/><text x="425" y="55">write refused</text><circle cx="540" cy="51" r="2" fill="#446"/><text x="547" y="55">event heard</text><rect x="650" y="46" width="14" height="10" fill="#d00" fill-opacity="0.2"/><text x="668" y="55">master down</text><rect x="770" y="46" width="14" height="10" fill="{MASTER_UP}"/><text x="788" y="55">master up (epoch)</text>"##
    );

    // Lanes and session states.
    let mut state: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
    let mut bands = String::new();
    let mut band = |lane: usize, from: u64, to: u64, fill: &str| {
        if to > from {
            let _ = writeln!(
                bands,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{}" fill="{fill}"/>"#,
                x(from),
                y(lane) + 4.0,
                (x(to) - x(from)).max(0.5),
                LANE - 8.0
            );
        }
    };
    let mut marks = String::new();
    let mut holding: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    let mut cuts: BTreeMap<&str, u64> = BTreeMap::new();
    let mut crashed: Option<u64> = None;
    let mut crashes: Vec<(u64, u64)> = Vec::new();
    for e in &run.entries {
        let Some(&lane) = lane_of.get(e.who.as_str()) else {
            continue;
        };
        let ly = y(lane);
        match &e.what {
            What::SessionStarted { .. } => {
                if let Some((s, from)) = state.insert(&e.who, ("normal", e.at)) {
                    band(lane, from, e.at, colour(s));
                }
            }
            What::State { state: s, .. } => {
                if let Some((old, from)) = state.insert(&e.who, (s.as_str(), e.at)) {
                    band(lane, from, e.at, colour(old));
                }
                if matches!(s.as_str(), "safe" | "failover") {
                    let _ = writeln!(
                        marks,
                        r#"<rect x="{:.1}" y="{:.1}" width="3" height="{}" fill="{}"/>"#,
                        x(e.at) - 1.0,
                        ly + 2.0,
                        LANE - 4.0,
                        colour(s)
                    );
                }
            }
            What::Holding {
                lock, generation, ..
            } => {
                holding.insert((&e.who, lock), (e.at, *generation));
            }
            What::Released { lock, .. } => {
                if let Some((from, generation)) = holding.remove(&(e.who.as_str(), lock.as_str())) {
                    hold_bar(&mut marks, x(from), x(e.at), ly, lock, generation);
                }
            }
            What::Write { accepted, .. } => {
                let (stroke, w) = if *accepted { ("#080", 1) } else { ("#d00", 2) };
                let _ = writeln!(
                    marks,
                    r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{stroke}" stroke-width="{w}"/>"#,
                    x(e.at),
                    ly + LANE - 12.0,
                    x(e.at),
                    ly + LANE - 4.0
                );
            }
            What::Serving { epoch } if cell => {
                let _ = writeln!(
                    marks,
                    r#"<text x="{:.1}" y="{:.1}" font-size="9">epoch {epoch}</text>"#,
                    x(e.at) + 2.0,
                    ly + 10.0
                );
            }
            What::Fault { fault, .. } if cell && is_server(&e.who) => match fault.as_str() {
                "crash" => {
                    cuts.insert(&e.who, e.at);
                }
                "restart" => {
                    if let Some(from) = cuts.remove(e.who.as_str()) {
                        master_band(&mut marks, x(from), x(e.at), ly, MASTER_DOWN, "down");
                    }
                }
                f if f.starts_with("partition") => {
                    cuts.insert(&e.who, e.at);
                }
                _ => {
                    if let Some(from) = cuts.remove(e.who.as_str()) {
                        cut_mark(&mut marks, (x(from), x(e.at)), ly, "cut", (from, e.at));
                    }
                }
            },
            What::Fault { fault, .. } => match fault.as_str() {
                "crash" => crashed = Some(e.at),
                "restart" => {
                    if let Some(from) = crashed.take() {
                        crashes.push((from, e.at));
                    }
                }
                f if f.starts_with("partition") || f == "hold" => {
                    cuts.insert(&e.who, e.at);
                }
                _ => {
                    if let Some(from) = cuts.remove(e.who.as_str()) {
                        let label = if fault == "release" { "held" } else { "cut" };
                        cut_mark(&mut marks, (x(from), x(e.at)), ly, label, (from, e.at));
                    }
                }
            },
            What::Event { .. } => {
                let _ = writeln!(
                    marks,
                    r##"<circle cx="{:.1}" cy="{:.1}" r="1.5" fill="#446"/>"##,
                    x(e.at),
                    ly + LANE / 2.0
                );
            }
            What::EventsLost => {
                let _ = writeln!(
                    marks,
                    r##"<text x="{:.1}" y="{:.1}" fill="#d00">lost</text>"##,
                    x(e.at),
                    ly + 12.0
                );
            }
            _ => {}
        }
    }
    for (who, (s, from)) in state {
        band(lane_of[who], from, run.end, colour(s));
    }
    for ((who, lock), (from, generation)) in holding {
        hold_bar(
            &mut marks,
            x(from),
            x(run.end),
            y(lane_of[who]),
            lock,
            generation,
        );
    }
    if let Some(from) = crashed {
        crashes.push((from, run.end));
    }
    // The master's lane: up under each epoch (a fresh store's first is 1,
    // and every start takes the next, `FO-1`), down between a crash and
    // its restart.
    let master = lane_of.get("master").map_or(-LANE, |&l| y(l));
    let mut up_from = if cell { run.end } else { 0 };
    for (epoch, (down, up)) in (1..).zip(crashes.iter().copied()) {
        master_band(
            &mut bands,
            x(up_from),
            x(down),
            master,
            MASTER_UP,
            &format!("epoch {epoch}"),
        );
        master_band(&mut bands, x(down), x(up), master, MASTER_DOWN, "down");
        up_from = up;
    }
    if up_from < run.end {
        let epoch = crashes.len() + 1;
        master_band(
            &mut bands,
            x(up_from),
            x(run.end),
            master,
            MASTER_UP,
            &format!("epoch {epoch}"),
        );
    }
    out.push_str(&bands);
    for (i, lane) in lanes.iter().enumerate() {
        let _ = writeln!(
            out,
            r##"<text x="8" y="{:.1}">{}</text><line x1="{LEFT}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#ddd"/>"##,
            y(i) + LANE / 2.0 + 4.0,
            escape(lane),
            y(i) + LANE,
            WIDTH - 20.0,
            y(i) + LANE
        );
    }
    out.push_str(&marks);
    let bottom = TOP + lanes.len() as f64 * LANE;
    for (from, to) in crashes {
        let _ = writeln!(
            out,
            r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#d00" fill-opacity="0.2"><title>master down {from}..{to} ms</title></rect>"##,
            x(from),
            (x(to) - x(from)).max(1.0),
            bottom - TOP
        );
    }
    // Axis: a tick every five virtual seconds.
    let mut second = 0;
    while second * 1000 <= run.end {
        let tx = x(second * 1000);
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.1}" y1="{bottom:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#888"/><text x="{:.1}" y="{:.1}">{second}s</text>"##,
            bottom + 5.0,
            tx - 6.0,
            bottom + 18.0
        );
        second += 5;
    }
    out.push_str("</svg>\n");
    out
}

const MASTER_UP: &str = "#b9e3b9";
const MASTER_DOWN: &str = "#f3a0a0";

/// One stretch of the master's lane, labelled where it is wide enough.
/// A hatched stretch of a lane, `label`led in its tooltip with the virtual
/// times it spans.
fn cut_mark(
    out: &mut String,
    (x0, x1): (f64, f64),
    lane_y: f64,
    label: &str,
    (from, to): (u64, u64),
) {
    let _ = writeln!(
        out,
        r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{}" fill="url(#cut)"><title>{label} {from}..{to} ms</title></rect>"#,
        lane_y + 2.0,
        (x1 - x0).max(1.0),
        LANE - 4.0,
    );
}

fn master_band(out: &mut String, from: f64, to: f64, lane_y: f64, fill: &str, label: &str) {
    let width = to - from;
    if width <= 0.0 {
        return;
    }
    let _ = writeln!(
        out,
        r#"<rect x="{from:.1}" y="{:.1}" width="{width:.1}" height="{}" fill="{fill}"><title>master {label}</title></rect>"#,
        lane_y + 4.0,
        LANE - 8.0
    );
    if width > 7.0 * label.len() as f64 {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}">{label}</text>"#,
            from + 3.0,
            lane_y + LANE / 2.0 + 4.0
        );
    }
}

/// A holding: a bar named by its lock and generation (`lock:g2`), in full
/// in its tooltip and, where the bar is wide enough, on it.
fn hold_bar(out: &mut String, from: f64, to: f64, lane_y: f64, lock: &str, generation: u64) {
    let width = (to - from).max(1.0);
    let lock = escape(lock);
    let _ = writeln!(
        out,
        r##"<rect x="{from:.1}" y="{:.1}" width="{width:.1}" height="6" fill="#223"><title>holds {lock} generation {generation}</title></rect>"##,
        lane_y + 8.0
    );
    // Semaphore slots have no generation (0): the name alone.
    let label = if generation > 0 {
        format!("{lock}:g{generation}")
    } else {
        lock.clone()
    };
    if width > 6.0 * label.len() as f64 {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="9">{label}</text>"##,
            from + 2.0,
            lane_y + 24.0
        );
    }
}
