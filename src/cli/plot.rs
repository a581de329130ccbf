//! `tune MODEL.onnx --plot out.svg`: the tuning curve as an SVG chart, the best model
//! latency (kernel sum, ms) against trials and against wall time, side by side.
use plotters::prelude::*;
use std::path::Path;
use ttdb_tuning::tune::model::CurvePoint;

/// The panels' axis labels (the tests look for them in the SVG).
const X_TRIALS: &str = "trials";
const X_WALL: &str = "wall time (s)";
const Y_MODEL: &str = "best model latency, kernel sum (ms)";

const SIZE: (u32, u32) = (1200, 480);
const LINE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);

/// Writes the chart of `curve` to `path`, titled `title`. The points before every kernel
/// has a time (model ms NaN) are left out; the best-so-far is drawn as steps.
pub fn write_tune_plot(path: &Path, title: &str, curve: &[CurvePoint]) -> Result<(), String> {
    let svg = render(title, curve)
        .map_err(|e| format!("{}: cannot draw the plot: {e}", path.display()))?;
    ttdb_format::atomic_file::write(path, svg.as_bytes())
        .map_err(|e| format!("{}: cannot write the plot: {e}", path.display()))
}

fn render(title: &str, curve: &[CurvePoint]) -> Result<String, Box<dyn std::error::Error>> {
    let points: Vec<&CurvePoint> = curve.iter().filter(|p| p.model_ms.is_finite()).collect();
    let by_trial: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.trial as f64, p.model_ms))
        .collect();
    let by_wall: Vec<(f64, f64)> = points.iter().map(|p| (p.wall_s, p.model_ms)).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 20))?;
        let (left, right) = root.split_horizontally(SIZE.0 / 2);
        panel(
            &left,
            "best model latency vs trials",
            (X_TRIALS, 0),
            &by_trial,
        )?;
        panel(
            &right,
            "best model latency vs wall time",
            (X_WALL, 1),
            &by_wall,
        )?;
        root.present()?;
    }
    Ok(svg)
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    (x_label, x_decimals): (&str, usize),
    xy: &[(f64, f64)],
) -> Result<(), Box<dyn std::error::Error>> {
    let x_max = xy.iter().map(|p| p.0).fold(0.0, f64::max);
    let (y_lo, y_hi) = xy
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.1))
        });
    let (y_lo, y_hi) = if y_lo.is_finite() {
        (y_lo, y_hi)
    } else {
        (0.0, 1.0)
    };
    let pad = ((y_hi - y_lo) * 0.05).max(y_hi.abs() * 0.01).max(1e-6);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            0.0..x_max.max(1e-3) * 1.02,
            (y_lo - pad).max(0.0)..y_hi + pad,
        )?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(Y_MODEL)
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        // The bold grid only: the light one would be most of the file.
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| format!("{v:.x_decimals$}"))
        .y_label_formatter(&|v| format!("{v:.3}"))
        .draw()?;
    // The best so far only changes at a point: hold the previous value until then (a
    // point that changes nothing adds no vertex, except the last, where the line ends).
    let mut steps: Vec<(f64, f64)> = Vec::with_capacity(2 * xy.len());
    for (i, &(x, y)) in xy.iter().enumerate() {
        let last = i + 1 == xy.len();
        match steps.last().map(|p| p.1) {
            Some(prev) if prev == y && !last => continue,
            Some(prev) if prev != y => steps.push((x, prev)),
            _ => {}
        }
        steps.push((x, y));
    }
    chart.draw_series(LineSeries::new(steps, LINE.stroke_width(2)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve() -> Vec<CurvePoint> {
        let p = |trial, wall_s, model_ms| CurvePoint {
            trial,
            wall_s,
            kernel: 0,
            kernel_best_ms: 1.0,
            model_ms,
        };
        vec![
            p(8, 0.5, f64::NAN),
            p(16, 1.1, 3.0),
            p(24, 1.8, 2.5),
            p(32, 2.2, 2.5),
            p(40, 3.0, 1.75),
        ]
    }

    #[test]
    fn plot_draws_both_panels_with_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        write_tune_plot(&path, "ttdb tune m.onnx on Some CPU <x> & co", &curve()).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("Some CPU &lt;x&gt; &amp; co"), "{svg}");
        for label in [X_TRIALS, X_WALL, Y_MODEL] {
            assert!(
                svg.contains(&format!(">\n{label}\n</text>")),
                "{label}: {svg}"
            );
        }
        // One line per panel, the NaN point left out, as steps: (16, 3) (24, 3) (24, 2.5)
        // (40, 2.5) (40, 1.75); the unchanged point at trial 32 adds no vertex.
        let lines: Vec<&str> = svg
            .lines()
            .filter(|l| l.contains("stroke=\"#1F77B4\""))
            .collect();
        assert_eq!(lines.len(), 2, "{svg}");
        for l in lines {
            assert!(l.starts_with("<polyline"), "{l}");
            assert_eq!(l.matches(',').count(), 5, "{l}");
        }
    }

    #[test]
    fn plot_write_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/c.svg");
        let e = write_tune_plot(&path, "t", &curve()).unwrap_err();
        assert!(
            e.starts_with(&format!("{}: cannot write the plot", path.display())),
            "{e}"
        );
    }

    #[test]
    fn plot_without_a_model_time_still_draws_axes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        write_tune_plot(&path, "t", &curve()[..1]).unwrap();
        write_tune_plot(&path, "t", &[]).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains(X_WALL));
    }
}
