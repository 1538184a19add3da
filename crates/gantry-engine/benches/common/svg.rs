//! A small SVG line chart for the benches' cost curves: log–log axes, one or more series,
//! labelled ticks. Written here (about a hundred lines) rather than pulling a plotting crate.

use std::fmt::Write;

/// One line on a chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// One chart: a title, axis names, its series.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<Series<'a>>,
}

const W: f64 = 360.0;
const H: f64 = 240.0;
const LEFT: f64 = 58.0;
const BOTTOM: f64 = 44.0;
const TOP: f64 = 30.0;
const RIGHT: f64 = 12.0;

/// Powers of ten covering `lo..=hi` (positive values).
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = 10f64.powf(lo.log10().floor());
    let hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo { (lo, lo * 10.0) } else { (lo, hi) }
}

fn label(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v if v >= 1.0 => format!("{v}"),
        v => format!("{v:.3}").trim_end_matches('0').to_string(),
    }
}

impl Chart<'_> {
    /// The chart as an SVG group at horizontal offset `dx`.
    fn group(&self, dx: f64) -> String {
        let all: Vec<(f64, f64)> =
            self.series.iter().flat_map(|s| s.points.iter().copied()).filter(|&(x, y)| x > 0.0 && y > 0.0).collect();
        let (x_lo, x_hi) =
            decades(all.iter().map(|p| p.0).fold(f64::MAX, f64::min), all.iter().map(|p| p.0).fold(0.0, f64::max));
        let (y_lo, y_hi) =
            decades(all.iter().map(|p| p.1).fold(f64::MAX, f64::min), all.iter().map(|p| p.1).fold(0.0, f64::max));
        let px = |x: f64| LEFT + (x.log10() - x_lo.log10()) / (x_hi.log10() - x_lo.log10()) * (W - LEFT - RIGHT);
        let py = |y: f64| H - BOTTOM - (y.log10() - y_lo.log10()) / (y_hi.log10() - y_lo.log10()) * (H - BOTTOM - TOP);
        let mut g = format!("<g transform=\"translate({dx},0)\" font-family=\"sans-serif\" font-size=\"11\">\n");
        let _ = writeln!(
            g,
            "<text x=\"{}\" y=\"16\" font-size=\"13\" text-anchor=\"middle\">{}</text>",
            W / 2.0,
            self.title
        );
        let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
        let _ = writeln!(
            g,
            "<rect x=\"{x0}\" y=\"{y1}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>",
            x1 - x0,
            y0 - y1
        );
        let mut x = x_lo;
        while x <= x_hi * 1.0001 {
            let _ = writeln!(g, "<line x1=\"{0}\" y1=\"{y0}\" x2=\"{0}\" y2=\"{y1}\" stroke=\"#eee\"/>", px(x));
            let _ = writeln!(g, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", px(x), y0 + 14.0, label(x));
            x *= 10.0;
        }
        let mut y = y_lo;
        while y <= y_hi * 1.0001 {
            let _ = writeln!(g, "<line x1=\"{x0}\" y1=\"{0}\" x2=\"{x1}\" y2=\"{0}\" stroke=\"#eee\"/>", py(y));
            let _ =
                writeln!(g, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", x0 - 4.0, py(y) + 4.0, label(y));
            y *= 10.0;
        }
        let _ = writeln!(
            g,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            (x0 + x1) / 2.0,
            H - 8.0,
            self.x_label
        );
        let _ = writeln!(
            g,
            "<text transform=\"translate(12,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            (y0 + y1) / 2.0,
            self.y_label
        );
        for (i, s) in self.series.iter().enumerate() {
            let points: Vec<String> = s
                .points
                .iter()
                .filter(|&&(x, y)| x > 0.0 && y > 0.0)
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = writeln!(
                g,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
                points.join(" "),
                s.color
            );
            for p in &points {
                let (cx, cy) = p.split_once(',').expect("x,y");
                let _ = writeln!(g, "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"3\" fill=\"{}\"/>", s.color);
            }
            let ly = y1 + 14.0 + 14.0 * i as f64;
            let _ = writeln!(
                g,
                "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{}\" stroke-width=\"2\"/>",
                x0 + 8.0,
                x0 + 24.0,
                s.color
            );
            let _ = writeln!(g, "<text x=\"{}\" y=\"{}\">{}</text>", x0 + 28.0, ly + 4.0, s.name);
        }
        g.push_str("</g>\n");
        g
    }
}

/// Charts side by side, as one SVG document.
pub fn render(charts: &[Chart]) -> String {
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{H}\" viewBox=\"0 0 {0} {H}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        W * charts.len() as f64
    );
    for (i, chart) in charts.iter().enumerate() {
        svg.push_str(&chart.group(W * i as f64));
    }
    svg.push_str("</svg>\n");
    svg
}
