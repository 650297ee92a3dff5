//! Figures, their medians over runs, and the table or JSON object a
//! scenario prints: one column per system, the ratio of Leasehold to each
//! peer, and each figure against this machine's limit and its target.

use serde::Serialize;
use serde_json::json;

use crate::limits::{Bound, Limits};

/// Which way a figure improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Higher,
    Lower,
    /// A figure that describes the load rather than ranks the system.
    Neither,
}

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: String,
    pub unit: &'static str,
    pub value: f64,
    pub better: Better,
    /// What this machine allows at best, where that is known: computed
    /// from the machine's limits once the runs are over.
    pub limit: Option<f64>,
    #[serde(skip)]
    pub bound: Option<Bound>,
    /// The figure Leasehold aims for.
    pub target: Option<f64>,
}

impl Figure {
    pub fn higher(name: impl Into<String>, unit: &'static str, value: f64) -> Figure {
        Figure {
            name: name.into(),
            unit,
            value,
            better: Better::Higher,
            limit: None,
            bound: None,
            target: None,
        }
    }

    pub fn lower(name: impl Into<String>, unit: &'static str, value: f64) -> Figure {
        Figure {
            better: Better::Lower,
            ..Figure::higher(name, unit, value)
        }
    }

    pub fn neutral(name: impl Into<String>, unit: &'static str, value: f64) -> Figure {
        Figure {
            better: Better::Neither,
            ..Figure::higher(name, unit, value)
        }
    }

    /// The figure's best on this machine is `bound` of its limits.
    pub fn bounded_by(mut self, bound: Bound) -> Figure {
        self.bound = Some(bound);
        self
    }

    pub fn apply_limits(&mut self, limits: &Limits) {
        if let Some(bound) = self.bound {
            self.limit = Some(bound(limits));
        }
    }

    pub fn target(mut self, target: f64) -> Figure {
        self.target = Some(target);
        self
    }

    /// How many times better `self` is than `other` (above 1: better).
    fn ratio_to(&self, other: f64) -> Option<f64> {
        match self.better {
            Better::Higher => Some(self.value / other),
            Better::Lower => Some(other / self.value),
            Better::Neither => None,
        }
    }

    fn meets(&self, target: f64) -> bool {
        match self.better {
            Better::Higher | Better::Neither => self.value >= target,
            Better::Lower => self.value <= target,
        }
    }
}

/// One system's figures: the median of each over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub system: String,
    pub runs: usize,
    pub figures: Vec<Figure>,
}

impl Outcome {
    /// Takes each figure's median over `runs` (figures matched by name, in
    /// the first run's order).
    pub fn median(system: &str, runs: Vec<Vec<Figure>>) -> Outcome {
        let count = runs.len();
        let mut figures = runs.first().cloned().unwrap_or_default();
        for figure in &mut figures {
            let mut values: Vec<f64> = runs
                .iter()
                .filter_map(|run| run.iter().find(|f| f.name == figure.name))
                .map(|f| f.value)
                .collect();
            values.sort_by(f64::total_cmp);
            figure.value = values[values.len() / 2];
        }
        Outcome {
            system: system.to_string(),
            runs: count,
            figures,
        }
    }
}

/// A scenario's result across systems.
pub struct Report {
    pub scenario: String,
    pub parameters: serde_json::Value,
    pub limits: Option<Limits>,
    pub outcomes: Vec<Outcome>,
    /// Peers that failed the scenario, and why.
    pub failures: Vec<String>,
}

impl Report {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "scenario": self.scenario,
            "parameters": self.parameters,
            "limits": self.limits,
            "systems": self.outcomes,
            "failed": self.failures,
        })
    }

    /// The table, as Markdown so it pastes into BENCHMARKS.md.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        if let Some(l) = &self.limits {
            out.push_str(&format!(
                "machine: fsync {:.3} ms (median of {} probes), loopback round trip {:.3} ms, 64-connection echo {} round trips/s; the faster of before and after the runs\n",
                l.fsync_ms,
                l.fsync_probes,
                l.rtt_ms,
                thousands(l.echo_64_per_s)
            ));
            if let Some(why) = &l.noisy {
                out.push_str(&format!(
                    "NOISY: {why}; limits and shares of them are rough\n"
                ));
            }
        }
        let mut beyond = false;
        let Some(ours) = self.outcomes.first() else {
            return out;
        };
        let peers = &self.outcomes[1..];
        let mut header = vec!["figure".to_string(), ours.system.clone()];
        header.extend(peers.iter().map(|p| p.system.clone()));
        header.extend(peers.iter().map(|p| format!("vs {}", p.system)));
        header.extend(["limit", "of limit", "target", ""].map(String::from));
        let mut rows = vec![header];
        for figure in &ours.figures {
            let mut row = vec![figure.name.clone(), value(figure.value, figure.unit)];
            let theirs: Vec<Option<f64>> = peers
                .iter()
                .map(|p| {
                    p.figures
                        .iter()
                        .find(|f| f.name == figure.name)
                        .map(|f| f.value)
                })
                .collect();
            row.extend(
                theirs
                    .iter()
                    .map(|v| v.map_or("-".into(), |v| value(v, figure.unit))),
            );
            row.extend(theirs.iter().map(|v| {
                v.filter(|v| *v > 0.0 && figure.value > 0.0)
                    .and_then(|v| figure.ratio_to(v))
                    .map_or("-".into(), |r| format!("{r:.2}x"))
            }));
            match figure.limit {
                Some(limit) => {
                    row.push(value(limit, figure.unit));
                    let share = match figure.better {
                        Better::Lower => limit / figure.value,
                        _ => figure.value / limit,
                    };
                    // Past the limit means the probes met a slower
                    // machine than the runs did: flagged, not believed.
                    let flag = if share > 1.05 {
                        beyond = true;
                        " (!)"
                    } else {
                        ""
                    };
                    row.push(format!("{:.0}%{flag}", 100.0 * share));
                }
                None => row.extend(["-".to_string(), "-".to_string()]),
            }
            match figure.target {
                Some(target) => {
                    let sign = if figure.better == Better::Higher {
                        ">="
                    } else {
                        "<="
                    };
                    row.push(format!("{sign} {}", value(target, figure.unit)));
                    row.push(
                        if figure.meets(target) {
                            "met"
                        } else {
                            "MISSED"
                        }
                        .into(),
                    );
                }
                None => row.extend(["-".to_string(), String::new()]),
            }
            rows.push(row);
        }
        // Figures only a peer has (none today) would be dropped; every
        // scenario reports the same names for every system.
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
            if i == 0 {
                let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                out.push_str(&format!("| {} |\n", rule.join(" | ")));
            }
        }
        if ours.runs > 1 {
            out.push_str(&format!("median of {} runs per system\n", ours.runs));
        }
        if beyond {
            out.push_str(
                "(!) above the limit: the machine was faster during the runs than during both probes; the limit is a floor, not a ceiling\n",
            );
        }
        for failure in &self.failures {
            out.push_str(&format!("failed: {failure}\n"));
        }
        out
    }
}

/// `1234567.8` as `1,234,568`.
pub fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 {
        out.insert(0, '-');
    }
    out
}

fn value(v: f64, unit: &str) -> String {
    if !v.is_finite() {
        return format!("- {unit}");
    }
    let number = if v.abs() >= 100.0 || (v.fract() == 0.0 && unit.is_empty()) {
        thousands(v)
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    format!("{number} {unit}").trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1000.0), "-1,000");
    }

    #[test]
    fn the_median_is_taken_per_figure() {
        let run = |v| {
            vec![
                Figure::higher("x", "/s", v),
                Figure::lower("y", "ms", 10.0 - v),
            ]
        };
        let outcome = Outcome::median("leasehold", vec![run(1.0), run(9.0), run(3.0)]);
        assert_eq!(outcome.figures[0].value, 3.0);
        assert_eq!(outcome.figures[1].value, 7.0);
    }

    #[test]
    fn ratios_favour_the_better_figure_whichever_way_it_improves() {
        let fast = Figure::higher("x", "/s", 300.0);
        assert_eq!(fast.ratio_to(100.0), Some(3.0));
        let quick = Figure::lower("y", "ms", 2.0);
        assert_eq!(quick.ratio_to(8.0), Some(4.0));
        let load = Figure::neutral("z", "/s", 5.0);
        assert_eq!(load.ratio_to(1.0), None);
    }

    #[test]
    fn a_figure_past_its_limit_is_flagged_not_believed() {
        let limits = Limits {
            fsync_ms: 8.0,
            fsync_probes: 120,
            rtt_ms: 0.05,
            echo_64_per_s: 50_000.0,
            noisy: Some("only 120 fsyncs fit".into()),
        };
        let mut figure = Figure::higher("cycles/s", "/s", 600.0).bounded_by(Limits::lock_1_client);
        figure.apply_limits(&limits);
        let report = Report {
            scenario: "lock".into(),
            parameters: json!({}),
            limits: Some(limits),
            outcomes: vec![Outcome::median("leasehold", vec![vec![figure]])],
            failures: Vec::new(),
        };
        let table = report.to_table();
        assert!(table.contains("NOISY: only 120 fsyncs fit"), "{table}");
        assert!(table.contains("% (!)"), "{table}");
        assert!(table.contains("(!) above the limit"), "{table}");
    }
}
