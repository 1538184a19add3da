//! One SVG line chart for every picture gantry draws — the simulator's reports (allocation
//! against arrived load, allocation and utilization over time) and the dashboard's
//! allocation-against-use charts — so they read the same. Plain strings, no dependencies;
//! every attribute quoted (the SVG is embedded in HTML, where an unquoted value would swallow
//! the `/` of `/>`).

use std::fmt::Write;

/// Escape text for SVG and HTML (element content and quoted attributes).
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Line {
    pub label: String,
    pub color: &'static str,
    pub dashed: bool,
    /// Shade the area under the line.
    pub filled: bool,
    pub points: Vec<(f64, f64)>,
}

/// What the chart shows and how big it is.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// x runs from `x_min` to `x_max`, with a grid line every `x_step` from `x_min`.
    pub x_min: f64,
    pub x_max: f64,
    pub x_step: f64,
    /// y runs from 0 to `y_max`, with a grid line every `y_step`.
    pub y_max: f64,
    pub y_step: f64,
    /// How an x grid value is written (default: the number).
    pub x_tick: Option<&'a dyn Fn(f64) -> String>,
    pub width: f64,
    pub height: f64,
    /// Room on the right for the legend (0: no legend).
    pub legend_width: f64,
}

impl std::fmt::Debug for Chart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chart")
            .field("title", &self.title)
            .field("x", &(self.x_min, self.x_max))
            .finish_non_exhaustive()
    }
}

impl Default for Chart<'_> {
    fn default() -> Self {
        Chart {
            title: "",
            x_label: "",
            y_label: "",
            x_min: 0.0,
            x_max: 1.0,
            x_step: 1.0,
            y_max: 100.0,
            y_step: 20.0,
            x_tick: None,
            width: 760.0,
            height: 420.0,
            legend_width: 220.0,
        }
    }
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.1}") }
}

/// A grid step giving about 5–10 ticks over `0..span`.
pub fn nice_step(span: f64) -> f64 {
    if span <= 0.0 {
        return 1.0;
    }
    let raw = span / 8.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let n = raw / magnitude;
    magnitude
        * if n <= 1.0 {
            1.0
        } else if n <= 2.0 {
            2.0
        } else if n <= 5.0 {
            5.0
        } else {
            10.0
        }
}

impl Chart<'_> {
    /// Draw `lines` (in order: later lines on top).
    pub fn svg(&self, lines: &[Line]) -> String {
        let (w, h) = (self.width, self.height);
        let f = self.frame();
        let mut svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" style="width:100%;max-width:{w}px;height:auto" font-family="system-ui,sans-serif" font-size="12" role="img"><rect width="100%" height="100%" fill="white"></rect>"#
        );
        if !self.title.is_empty() {
            let _ = write!(
                svg,
                r#"<text x="{}" y="22" font-size="14" font-weight="bold">{}</text>"#,
                f.left,
                escape(self.title)
            );
        }
        self.grid(&f, &mut svg);
        self.axes(&f, &mut svg);
        for (i, line) in lines.iter().enumerate() {
            self.line(&f, i, line, &mut svg);
        }
        svg.push_str("</svg>");
        svg
    }

    /// The plot area inside the margins, and the scales onto it.
    fn frame(&self) -> Frame {
        let top = if self.title.is_empty() { 14.0 } else { 40.0 };
        // Room on the right for the last x label when there is no legend.
        let (left, right, bottom) =
            (60.0, (self.legend_width + 20.0).max(40.0), if self.x_label.is_empty() { 30.0 } else { 50.0 });
        let (pw, ph) = (self.width - left - right, self.height - top - bottom);
        let span = if self.x_max > self.x_min { self.x_max - self.x_min } else { 1.0 };
        let y_max = if self.y_max > 0.0 { self.y_max } else { 1.0 };
        Frame { left, top, pw, ph, x_min: self.x_min, span, y_max }
    }

    /// Horizontal grid lines with the y ticks, vertical ones with the x ticks.
    fn grid(&self, f: &Frame, svg: &mut String) {
        let (left, top, pw, ph) = (f.left, f.top, f.pw, f.ph);
        let y_step = if self.y_step > 0.0 { self.y_step } else { f.y_max };
        let mut tick = 0.0;
        while tick <= f.y_max + 1e-9 {
            let ty = f.y(tick);
            let _ = write!(
                svg,
                r##"<line x1="{left}" y1="{ty:.1}" x2="{}" y2="{ty:.1}" stroke="#e3e6eb"></line><text x="{}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
                left + pw,
                left - 6.0,
                ty + 4.0,
                number(tick)
            );
            tick += y_step;
        }
        let x_step = if self.x_step > 0.0 { self.x_step } else { f.span };
        let mut tick = self.x_min;
        while tick <= self.x_max + 1e-9 {
            let tx = f.x(tick);
            let text = self.x_tick.map_or_else(|| number(tick), |t| t(tick));
            let _ = write!(
                svg,
                r##"<line x1="{tx:.1}" y1="{top}" x2="{tx:.1}" y2="{}" stroke="#f0f1f4"></line><text x="{tx:.1}" y="{}" text-anchor="middle" fill="#555">{}</text>"##,
                top + ph,
                top + ph + 16.0,
                escape(&text)
            );
            tick += x_step;
        }
    }

    /// The two axes and their labels.
    fn axes(&self, f: &Frame, svg: &mut String) {
        let (left, top, pw, ph) = (f.left, f.top, f.pw, f.ph);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"></line><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="#333"></line><text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(16 {}) rotate(-90)" text-anchor="middle">{}</text>"##,
            top + ph,
            left + pw,
            top + ph,
            top + ph,
            left + pw / 2.0,
            self.height - 12.0,
            escape(self.x_label),
            top + ph / 2.0,
            escape(self.y_label)
        );
    }

    /// Line `i`: its area when filled, its polyline, its legend entry.
    fn line(&self, f: &Frame, i: usize, line: &Line, svg: &mut String) {
        let (left, top, pw) = (f.left, f.top, f.pw);
        let dash = if line.dashed { r#" stroke-dasharray="5 3""# } else { "" };
        let points: Vec<String> =
            line.points.iter().map(|&(px, py)| format!("{:.1},{:.1}", f.x(px), f.y(py))).collect();
        if line.filled && line.points.len() > 1 {
            let (first, last) = (line.points[0].0, line.points[line.points.len() - 1].0);
            let _ = write!(
                svg,
                r#"<polygon fill="{}" fill-opacity="0.2" stroke="none" points="{:.1},{:.1} {} {:.1},{:.1}"></polygon>"#,
                line.color,
                f.x(first),
                f.y(0.0),
                points.join(" "),
                f.x(last),
                f.y(0.0)
            );
        }
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.8"{dash} points="{}"></polyline>"#,
            line.color,
            points.join(" ")
        );
        if self.legend_width > 0.0 {
            let ly = top + 14.0 + i as f64 * 18.0;
            let _ = write!(
                svg,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="3"{dash}></line><text x="{}" y="{}">{}</text>"#,
                left + pw + 12.0,
                ly - 4.0,
                left + pw + 30.0,
                ly - 4.0,
                line.color,
                left + pw + 36.0,
                ly,
                escape(&line.label)
            );
        }
    }
}

/// A chart's plot area (pixels) and its data ranges.
struct Frame {
    left: f64,
    top: f64,
    pw: f64,
    ph: f64,
    x_min: f64,
    span: f64,
    y_max: f64,
}

impl Frame {
    fn x(&self, v: f64) -> f64 {
        self.left + (v - self.x_min) / self.span * self.pw
    }

    fn y(&self, v: f64) -> f64 {
        self.top + (1.0 - v.clamp(0.0, self.y_max) / self.y_max) * self.ph
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_its_lines_grid_and_legend_and_no_self_closing_tags() {
        let lines = [
            Line {
                label: "allocated <a>".into(),
                color: "#4e79a7",
                dashed: false,
                filled: true,
                points: vec![(0.0, 10.0), (5.0, 40.0)],
            },
            Line {
                label: "used".into(),
                color: "#e15759",
                dashed: true,
                filled: false,
                points: vec![(0.0, 5.0), (5.0, 20.0)],
            },
        ];
        let chart = Chart { title: "t", x_max: 5.0, x_step: 1.0, y_max: 50.0, y_step: 10.0, ..Chart::default() };
        let svg = chart.svg(&lines);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<polygon").count(), 1, "the filled line");
        assert!(svg.contains("allocated &lt;a&gt;") && svg.contains("stroke-dasharray"));
        assert!(!svg.contains("/>"), "{svg}");
        let custom = Chart { x_tick: Some(&|v| format!("t{v}")), legend_width: 0.0, ..chart };
        let svg = custom.svg(&lines);
        assert!(svg.contains(">t0<") && !svg.contains("allocated"), "no legend: {svg}");
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(100.0), 20.0);
        assert_eq!(nice_step(7.0), 1.0);
        assert_eq!(nice_step(0.0), 1.0);
    }
}
