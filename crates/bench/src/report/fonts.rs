//! A TrueType font for PNG text. plotters (built without its C font stack)
//! rasterizes with ab_glyph, which needs the font's bytes; they are read
//! from the system at run time so the binary carries no font. SVGs name a
//! family and let the viewer choose, so they never need this.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use plotters::style::FontStyle;

use super::plot::FAMILY;

/// Where distributions put DejaVu Sans or Liberation Sans (Debian/Ubuntu
/// `fonts-dejavu-core`, Fedora, Arch, openSUSE).
pub const CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Font files read so far: plotters keeps `&'static` references, so each
/// file is read and leaked once per process however many reports are made.
fn cache() -> &'static Mutex<HashMap<PathBuf, &'static [u8]>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, &'static [u8]>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

fn read(path: &Path) -> Result<&'static [u8], String> {
    let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = cache.get(path) {
        return Ok(b);
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    cache.insert(path.to_path_buf(), bytes);
    Ok(bytes)
}

fn register(path: &Path, style: FontStyle) -> Result<(), String> {
    let bytes = read(path)?;
    plotters::style::register_font(FAMILY, style, bytes)
        .map_err(|_| format!("{}: not a TrueType/OpenType font", path.display()))
}

/// Registers `explicit`, or the first candidate that exists, for PNG text
/// (and its bold sibling for titles when there is one). Returns the path
/// used, or why there is none.
pub fn install(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => CANDIDATES.iter().map(PathBuf::from).find(|p| p.is_file()).ok_or_else(|| {
            format!(
                "no TrueType font found (looked for {}); install fonts-dejavu-core or pass --font FILE.ttf",
                CANDIDATES.join(", ")
            )
        })?,
    };
    register(&path, FontStyle::Normal)?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let bold = path.with_file_name(format!("{}-Bold.ttf", name.trim_end_matches("-Regular")));
    if bold.is_file() {
        // Titles fall back to the regular face when this fails.
        let _ = register(&bold, FontStyle::Bold);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_bogus_font_is_an_explained_refusal() {
        let err = install(Some(Path::new("/nonexistent/font.ttf"))).unwrap_err();
        assert!(err.contains("/nonexistent/font.ttf"), "{err}");
        let dir = std::env::temp_dir().join(format!("keel-report-font-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bogus = dir.join("bogus.ttf");
        std::fs::write(&bogus, b"not a font").unwrap();
        let err = install(Some(&bogus)).unwrap_err();
        assert!(err.contains("not a TrueType"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
