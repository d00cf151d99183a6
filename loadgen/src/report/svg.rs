//! The `--plot` SVG: latency by percentile, one curve per target.
//!
//! The x axis is the percentile on a log "nines" scale (0%, 90%, 99%,
//! 99.9%, 99.99%: x = log10(1 / (1 - q))), the y axis the latency on a log
//! scale. Each target's curve is its primary metric merged over its passes.
//! Written by hand: it is a few elements.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::adapter::TargetUrl;

const WIDTH: f64 = 960.0;
/// Height of the plot area with its axes; the legend adds a line per curve.
const PLOT_HEIGHT: f64 = 560.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 40.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
/// Height of one legend line, below the plot.
const LEGEND_LINE: f64 = 22.0;
/// The right end of the x axis: four nines.
const NINES_MAX: f64 = 4.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Escapes text for XML.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Label of a power of ten of microseconds.
fn decade_label(exp: i32) -> String {
    let us = 10f64.powi(exp);
    if us < 1_000.0 {
        format!("{us:.0}us")
    } else if us < 1_000_000.0 {
        format!("{:.0}ms", us / 1e3)
    } else {
        format!("{:.0}s", us / 1e6)
    }
}

fn nines(q: f64) -> f64 {
    if q >= 1.0 {
        NINES_MAX
    } else {
        (1.0 / (1.0 - q)).log10().min(NINES_MAX)
    }
}

/// The points of one curve: (nines, latency µs), from the histogram's
/// percentile iteration.
fn points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut pts: Vec<(f64, f64)> = h
        .iter_quantiles(20)
        .map(|v| {
            (
                nines(v.quantile_iterated_to()),
                v.value_iterated_to().max(1) as f64,
            )
        })
        .collect();
    // Beyond four nines the curve ends at the maximum.
    pts.push((NINES_MAX, h.max().max(1) as f64));
    pts
}

/// Renders the plot. `title` names the metric; `curves` are (target,
/// histogram in µs) in legend order.
pub fn render(title: &str, curves: &[(TargetUrl, Histogram<u64>)]) -> String {
    let all: Vec<Vec<(f64, f64)>> = curves.iter().map(|(_, h)| points(h)).collect();
    let (lo, hi) = all
        .iter()
        .flatten()
        .fold((f64::MAX, 1.0f64), |(lo, hi), &(_, y)| {
            (lo.min(y), hi.max(y))
        });
    let lo_exp = if lo == f64::MAX {
        0
    } else {
        lo.log10().floor() as i32
    };
    let hi_exp = (hi.log10().ceil() as i32).max(lo_exp + 1);
    let a = Axes {
        lo_exp,
        hi_exp,
        plot_w: WIDTH - LEFT - RIGHT,
        plot_h: PLOT_HEIGHT - TOP - BOTTOM,
    };
    let height = PLOT_HEIGHT + LEGEND_LINE * curves.len() as f64 + 10.0;

    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="28" font-size="16" text-anchor="middle">{}</text>"#,
        LEFT + a.plot_w / 2.0,
        escape(title)
    );
    write_axes(&mut s, &a);
    write_curves(&mut s, &a, curves, &all);
    let _ = writeln!(s, "</svg>");
    s
}

/// The plot area: its size, and the decades of its latency axis.
struct Axes {
    lo_exp: i32,
    hi_exp: i32,
    plot_w: f64,
    plot_h: f64,
}

impl Axes {
    /// The x coordinate of `n` nines.
    fn x_of(&self, n: f64) -> f64 {
        LEFT + n / NINES_MAX * self.plot_w
    }

    /// The y coordinate of a latency in µs (logarithmic).
    fn y_of(&self, us: f64) -> f64 {
        let t = (us.log10() - f64::from(self.lo_exp)) / f64::from(self.hi_exp - self.lo_exp);
        TOP + self.plot_h * (1.0 - t)
    }
}

/// Grid, axes and their labels.
fn write_axes(s: &mut String, a: &Axes) {
    // Grid and axes.
    let _ = writeln!(s, r##"<g class="grid" stroke="#dddddd" stroke-width="1">"##);
    for n in 0..=NINES_MAX as i32 {
        let x = a.x_of(f64::from(n));
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}"/>"#,
            TOP + a.plot_h
        );
    }
    for e in a.lo_exp..=a.hi_exp {
        let y = a.y_of(10f64.powi(e));
        let _ = writeln!(
            s,
            r#"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/>"#,
            LEFT + a.plot_w
        );
    }
    let _ = writeln!(s, "</g>");
    let _ = writeln!(
        s,
        r#"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        a.plot_w, a.plot_h
    );
    let _ = writeln!(s, r#"<g class="x-labels" text-anchor="middle">"#);
    for (n, label) in ["0%", "90%", "99%", "99.9%", "99.99%"].iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{label}</text>"#,
            a.x_of(n as f64),
            TOP + a.plot_h + 18.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}">percentile</text>"#,
        LEFT + a.plot_w / 2.0,
        TOP + a.plot_h + 42.0
    );
    let _ = writeln!(s, "</g>");
    let _ = writeln!(s, r#"<g class="y-labels" text-anchor="end">"#);
    for e in a.lo_exp..=a.hi_exp {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT - 8.0,
            a.y_of(10f64.powi(e)) + 4.0,
            decade_label(e)
        );
    }
    let _ = writeln!(s, "</g>");
}

/// One path per curve, and its legend line.
fn write_curves(
    s: &mut String,
    a: &Axes,
    curves: &[(TargetUrl, Histogram<u64>)],
    all: &[Vec<(f64, f64)>],
) {
    // Curves and legend.
    for (i, ((target, h), pts)) in curves.iter().zip(all).enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut d = String::new();
        for (j, &(n, us)) in pts.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.2},{:.2} ",
                if j == 0 { 'M' } else { 'L' },
                a.x_of(n),
                a.y_of(us)
            );
        }
        let _ = writeln!(
            s,
            r#"<path class="curve" d="{}" fill="none" stroke="{color}" stroke-width="2"><title>{}</title></path>"#,
            d.trim_end(),
            escape(&target.to_string())
        );
        let ly = PLOT_HEIGHT + i as f64 * LEGEND_LINE;
        let lx = LEFT;
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/>"#,
            lx + 24.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{} ({} samples)</text>"#,
            lx + 30.0,
            ly + 4.0,
            escape(&target.to_string()),
            h.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::new_histogram;

    /// Checks that every tag is closed in order, and counts elements by name.
    fn balanced(svg: &str) -> Result<std::collections::HashMap<String, usize>, String> {
        let mut stack: Vec<String> = Vec::new();
        let mut counts = std::collections::HashMap::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let close = rest[open..].find('>').ok_or("unclosed '<'")? + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let top = stack.pop().ok_or(format!("</{name}> with nothing open"))?;
                if top != name.trim() {
                    return Err(format!("</{name}> closes <{top}>"));
                }
                continue;
            }
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            *counts.entry(name.clone()).or_insert(0) += 1;
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        if stack.is_empty() {
            Ok(counts)
        } else {
            Err(format!("left open: {stack:?}"))
        }
    }

    #[test]
    fn well_formed_with_one_path_per_target() {
        let mut a = new_histogram();
        let mut b = new_histogram();
        for v in 1..=10_000u64 {
            a.record(v).unwrap();
            b.record(v * 30).unwrap();
        }
        let curves = vec![
            (TargetUrl::parse("redis://127.0.0.1:6379").unwrap(), a),
            (TargetUrl::parse("nats://127.0.0.1:4222").unwrap(), b),
            (
                TargetUrl::parse("beanstalkd://127.0.0.1:11300").unwrap(),
                new_histogram(),
            ),
        ];
        let svg = render("send to receive <latency> & more", &curves);
        let counts = balanced(&svg).unwrap();
        assert_eq!(counts["svg"], 1);
        assert_eq!(counts["path"], 3, "one path per target");
        assert_eq!(svg.matches(r#"class="curve""#).count(), 3);
        assert!(svg.contains("redis://127.0.0.1:6379"));
        assert!(svg.contains("&lt;latency&gt; &amp; more"));
        for label in ["99.99%", "99.9%", "1us", "1ms", "100ms", "1s"] {
            assert!(svg.contains(&format!(">{label}<")), "axis label {label}");
        }
    }

    #[test]
    fn the_checker_catches_unbalanced_tags() {
        assert!(balanced("<svg><g></svg>").is_err());
        assert!(balanced("<svg><path/></svg>").is_ok());
    }

    #[test]
    fn nines_scale() {
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(0.99) - 2.0).abs() < 1e-9);
        assert_eq!(nines(1.0), NINES_MAX);
        assert_eq!(nines(0.999_999), NINES_MAX);
    }
}
