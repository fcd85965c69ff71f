//! The plot for docs: time until all N hosts are in the target state against N, bmo
//! (solid) and direct Ironic (dashed), one colour per work; log–log, so that 10 to
//! 1000 hosts fit and equal ratios are equal distances. Written as SVG.

use std::fmt::Write as _;

use crate::measure::RunResult;
use crate::workload::Work;

/// One line of the plot: (N, seconds to all in the target state) points.
struct Series {
    label: String,
    colour: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// bmo and direct Ironic for each work that has points.
fn series(results: &[RunResult]) -> Vec<Series> {
    let mut series = Vec::new();
    for (work, colour) in [(Work::Fake, "#1f77b4"), (Work::Redfish, "#d62728")] {
        for (who, dashed) in [("bmo", false), ("direct Ironic", true)] {
            let points: Vec<(f64, f64)> = results
                .iter()
                .filter(|r| r.work == work)
                .map(|r| {
                    let t = if dashed {
                        r.direct_target()
                    } else {
                        r.bmo_target()
                    };
                    (r.n as f64, t.max)
                })
                .filter(|(_, secs)| *secs > 0.0)
                .collect();
            if !points.is_empty() {
                let label = format!("{who}, {} → {}", work.label(), work.target());
                series.push(Series {
                    label,
                    colour,
                    dashed,
                    points,
                });
            }
        }
    }
    series
}

/// The whole decades (log10) that hold the values.
fn decades(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| {
        (lo.min(v.log10()), hi.max(v.log10()))
    });
    if lo > hi {
        return (0.0, 1.0);
    }
    let (lo, hi) = (lo.floor(), hi.ceil());
    (lo, if hi > lo { hi } else { lo + 1.0 })
}

/// The picture's size, the plot area in it and the decades on each axis.
struct Frame {
    width: f64,
    height: f64,
    left: f64,
    top: f64,
    plot_w: f64,
    plot_h: f64,
    x_decades: (f64, f64),
    y_decades: (f64, f64),
}

impl Frame {
    fn new(series: &[Series]) -> Frame {
        let (width, height) = (840.0, 460.0);
        let (left, right, top, bottom) = (70.0, 320.0, 50.0, 60.0);
        let all = || series.iter().flat_map(|s| s.points.iter().copied());
        Frame {
            width,
            height,
            left,
            top,
            plot_w: width - left - right,
            plot_h: height - top - bottom,
            x_decades: decades(all().map(|(n, _)| n)),
            y_decades: decades(all().map(|(_, secs)| secs)),
        }
    }

    fn x(&self, n: f64) -> f64 {
        let (x0, x1) = self.x_decades;
        self.left + (n.log10() - x0) / (x1 - x0) * self.plot_w
    }

    fn y(&self, secs: f64) -> f64 {
        let (y0, y1) = self.y_decades;
        self.top + self.plot_h - (secs.log10() - y0) / (y1 - y0) * self.plot_h
    }
}

/// The opening tag, the background and the title.
fn heading(out: &mut String, f: &Frame) {
    let (width, height) = (f.width, f.height);
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{width}" height="{height}" fill="white"/>
<text x="{}" y="24" text-anchor="middle" font-size="15">Time until all N hosts are in the target state (cargo bench --bench scale)</text>"#,
        width / 2.0
    );
}

/// A grid line and a label at each decade of both axes.
fn grid(out: &mut String, f: &Frame) {
    let (top, left, plot_w, plot_h) = (f.top, f.left, f.plot_w, f.plot_h);
    for d in (f.x_decades.0 as i32)..=(f.x_decades.1 as i32) {
        let px = f.x(10f64.powi(d));
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + plot_h,
            top + plot_h + 18.0,
            10u64.pow(d.max(0) as u32)
        );
    }
    for d in (f.y_decades.0 as i32)..=(f.y_decades.1 as i32) {
        let py = f.y(10f64.powi(d));
        let label = if d >= 0 {
            format!("{}", 10u64.pow(d as u32))
        } else {
            format!("{}", 10f64.powi(d))
        };
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            left + plot_w,
            left - 6.0,
            py + 4.0
        );
    }
}

/// The plot area's border and the axes' titles.
fn border(out: &mut String, f: &Frame) {
    let (top, left, plot_w, plot_h) = (f.top, f.left, f.plot_w, f.plot_h);
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle">hosts applied at once (N, log scale)</text>
<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">seconds (log scale)</text>"##,
        left + plot_w / 2.0,
        f.height - 14.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
}

/// Series `i`: its line, a point (with its figure as a tooltip) per N, and its
/// legend entry right of the plot.
fn line(out: &mut String, f: &Frame, i: usize, s: &Series) {
    let (label, colour) = (&s.label, s.colour);
    let dash = if s.dashed {
        r#" stroke-dasharray="6 4""#
    } else {
        ""
    };
    let path: Vec<String> = s
        .points
        .iter()
        .map(|(n, secs)| format!("{:.1},{:.1}", f.x(*n), f.y(*secs)))
        .collect();
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
        path.join(" ")
    );
    for (n, secs) in &s.points {
        let _ = writeln!(
            out,
            r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"><title>{label}: N = {n}, {secs:.1} s</title></circle>"#,
            f.x(*n),
            f.y(*secs)
        );
    }
    let ly = f.top + 10.0 + 22.0 * i as f64;
    let lx = f.left + f.plot_w + 16.0;
    let _ = writeln!(
        out,
        r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{label}</text>"#,
        lx + 28.0,
        lx + 34.0,
        ly + 4.0
    );
}

pub fn svg(results: &[RunResult]) -> String {
    let series = series(results);
    let frame = Frame::new(&series);
    let mut out = String::new();
    heading(&mut out, &frame);
    grid(&mut out, &frame);
    border(&mut out, &frame);
    for (i, s) in series.iter().enumerate() {
        line(&mut out, &frame, i, s);
    }
    out.push_str("</svg>\n");
    out
}
