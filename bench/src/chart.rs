//! Charts of a scenario's report: `leasehold-bench chart` reads the JSON a
//! scenario printed with `--json` and draws one SVG, a group of horizontal
//! bars per figure (one bar per system), so the page that records the
//! figures can show them at a glance.

use std::fmt::Write;

use serde::Deserialize;

/// The parts of a report (`Report::to_json`) a chart needs.
#[derive(Debug, Deserialize)]
pub struct Chartable {
    pub scenario: String,
    pub systems: Vec<SystemFigures>,
}

#[derive(Debug, Deserialize)]
pub struct SystemFigures {
    pub system: String,
    pub runs: usize,
    pub figures: Vec<ChartFigure>,
}

#[derive(Debug, Deserialize)]
pub struct ChartFigure {
    pub name: String,
    pub unit: String,
    pub value: f64,
    pub better: String,
    pub limit: Option<f64>,
    pub target: Option<f64>,
}

const WIDTH: f64 = 760.0;
const LABEL: f64 = 230.0;
const BAR: f64 = 16.0;
const GAP: f64 = 4.0;
const GROUP_GAP: f64 = 22.0;
const TOP: f64 = 56.0;

fn colour(system: &str) -> &'static str {
    match system {
        "leasehold" => "#2563eb",
        "etcd" => "#9ca3af",
        "zookeeper" => "#d97706",
        _ => "#6b7280",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn number(v: f64) -> String {
    if v.abs() >= 100.0 {
        crate::report::thousands(v)
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The SVG of `report`: figures that rank the systems (not those that
/// describe the load), each scaled to the largest of its values, the
/// machine's limit (a dashed line) and its target (a red line), so that a
/// lone system's bars still say how far they are from either.
pub fn svg(report: &Chartable) -> String {
    let Some(first) = report.systems.first() else {
        return String::new();
    };
    let ranked: Vec<&ChartFigure> = first
        .figures
        .iter()
        .filter(|f| f.better != "neither" && f.value.is_finite())
        .collect();
    let systems = &report.systems;
    let group = systems.len() as f64 * (BAR + GAP) + GROUP_GAP + 14.0;
    let height = TOP + group * ranked.len() as f64 + 10.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r##"<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let runs = match first.runs {
        1 => "one run".to_string(),
        n => format!("median of {n} runs"),
    };
    let _ = writeln!(
        out,
        r#"<text x="10" y="22" font-size="16" font-weight="bold">{} ({runs})</text>"#,
        escape(&report.scenario),
    );
    // The legend.
    let mut x = 10.0;
    for system in systems {
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="32" width="12" height="12" fill="{}"/><text x="{}" y="42">{}</text>"#,
            colour(&system.system),
            x + 16.0,
            escape(&system.system)
        );
        x += 24.0 + 8.0 * system.system.len() as f64;
    }
    let _ = writeln!(
        out,
        r##"<line x1="{x}" y1="38" x2="{}" y2="38" stroke="#111827" stroke-dasharray="4 3"/><text x="{}" y="42">machine limit</text><line x1="{}" y1="38" x2="{}" y2="38" stroke="#dc2626" stroke-width="2"/><text x="{}" y="42">target</text>"##,
        x + 24.0,
        x + 30.0,
        x + 130.0,
        x + 154.0,
        x + 160.0
    );
    let span = WIDTH - LABEL - 90.0;
    for (i, figure) in ranked.iter().enumerate() {
        let y0 = TOP + group * i as f64;
        let direction = if figure.better == "lower" {
            "lower is better"
        } else {
            "higher is better"
        };
        let unit = if figure.unit.is_empty() {
            String::new()
        } else {
            format!("{}, ", escape(&figure.unit))
        };
        let _ = writeln!(
            out,
            r#"<text x="10" y="{}" font-weight="bold">{} ({unit}{direction})</text>"#,
            y0 + 10.0,
            escape(&figure.name),
        );
        let values: Vec<Option<f64>> = systems
            .iter()
            .map(|s| {
                s.figures
                    .iter()
                    .find(|f| f.name == figure.name)
                    .map(|f| f.value)
                    .filter(|v| v.is_finite())
            })
            .collect();
        let scale = values
            .iter()
            .flatten()
            .copied()
            .chain(figure.limit)
            .chain(figure.target)
            .fold(0.0_f64, f64::max);
        for (j, (system, value)) in systems.iter().zip(&values).enumerate() {
            let y = y0 + 16.0 + j as f64 * (BAR + GAP);
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                LABEL - 6.0,
                y + BAR - 4.0,
                escape(&system.system)
            );
            let Some(value) = value else {
                let _ = writeln!(
                    out,
                    r#"<text x="{LABEL}" y="{}">not measured</text>"#,
                    y + BAR - 4.0
                );
                continue;
            };
            let w = if scale > 0.0 {
                (value / scale * span).max(1.0)
            } else {
                1.0
            };
            let _ = writeln!(
                out,
                r#"<rect x="{LABEL}" y="{y}" width="{w:.1}" height="{BAR}" fill="{}"/><text x="{:.1}" y="{}">{} {}</text>"#,
                colour(&system.system),
                LABEL + w + 4.0,
                y + BAR - 4.0,
                number(*value),
                escape(&figure.unit)
            );
        }
        let bottom = y0 + 16.0 + systems.len() as f64 * (BAR + GAP);
        if let Some(limit) = figure.limit.filter(|l| *l > 0.0 && scale > 0.0) {
            let lx = LABEL + limit / scale * span;
            let _ = writeln!(
                out,
                r##"<line x1="{lx:.1}" y1="{}" x2="{lx:.1}" y2="{bottom}" stroke="#111827" stroke-dasharray="4 3"/>"##,
                y0 + 14.0
            );
        }
        if let Some(target) = figure.target.filter(|t| *t > 0.0 && scale > 0.0) {
            let tx = LABEL + target / scale * span;
            let _ = writeln!(
                out,
                r##"<line x1="{tx:.1}" y1="{}" x2="{tx:.1}" y2="{bottom}" stroke="#dc2626" stroke-width="2"><title>target {} {}</title></line>"##,
                y0 + 14.0,
                number(target),
                escape(&figure.unit)
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Chartable {
        serde_json::from_value(serde_json::json!({
            "scenario": "lock",
            "systems": [
                {"system": "leasehold", "runs": 3, "figures": [
                    {"name": "1 client", "unit": "/s", "value": 1200.0, "better": "higher", "limit": 1500.0, "target": null},
                    {"name": "p99", "unit": "ms", "value": 2.0, "better": "lower", "limit": null, "target": 18.0},
                    {"name": "clients", "unit": "", "value": 64.0, "better": "neither", "limit": null, "target": null}
                ]},
                {"system": "etcd", "runs": 3, "figures": [
                    {"name": "1 client", "unit": "/s", "value": 600.0, "better": "higher", "limit": null, "target": null},
                    {"name": "p99", "unit": "ms", "value": 9.0, "better": "lower", "limit": null, "target": null}
                ]}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn each_ranked_figure_gets_a_bar_per_system_and_load_figures_none() {
        let svg = svg(&report());
        // Two ranked figures, two systems: four bars, besides the
        // background and the legend's two swatches.
        assert_eq!(svg.matches("<rect").count(), 1 + 2 + 4);
        assert!(svg.contains("1 client (/s, higher is better)"));
        assert!(svg.contains("p99 (ms, lower is better)"));
        assert!(!svg.contains("clients ("), "a load figure is not ranked");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("lock (median of 3 runs)"));
    }

    #[test]
    fn a_figure_without_a_unit_says_only_which_way_is_better() {
        let mut r = report();
        r.systems[0].figures[1].unit = String::new();
        r.systems[1].figures[1].unit = String::new();
        let svg = svg(&r);
        assert!(svg.contains("p99 (lower is better)"), "{svg}");
    }

    #[test]
    fn bars_are_scaled_to_the_largest_value_the_limit_or_the_target() {
        let svg = svg(&report());
        let span = WIDTH - LABEL - 90.0;
        // 1200 of a 1500 limit, 600 of it; 9 ms and 2 ms of an 18 ms target.
        for w in [span * 0.8, span * 0.4, span * 0.5, span / 9.0] {
            assert!(svg.contains(&format!(r#"width="{w:.1}""#)), "{w:.1}: {svg}");
        }
        assert_eq!(
            svg.matches("stroke-dasharray").count(),
            2,
            "legend and one limit"
        );
        assert!(svg.contains("<title>target 18.0 ms</title>"));
    }

    #[test]
    fn names_are_escaped() {
        let mut r = report();
        r.scenario = "a<b & c".into();
        assert!(svg(&r).contains("a&lt;b &amp; c"));
    }
}
