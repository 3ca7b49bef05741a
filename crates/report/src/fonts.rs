//! A TrueType font for PNG text. plotters (built without its C font stack)
//! rasterizes with ab_glyph, which needs the font's bytes; they are read
//! from the system at run time so the binary carries no font. SVGs name a
//! family and let the viewer choose, so they never need this.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ab_glyph::FontRef;
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

/// The faces PNG text is rasterized with.
#[derive(Clone, Debug)]
pub struct RasterFonts {
    pub path: PathBuf,
    pub regular: FontRef<'static>,
    /// For titles; the regular face when the bold one is not found.
    pub bold: FontRef<'static>,
}

fn load(path: &Path, style: FontStyle) -> Result<FontRef<'static>, String> {
    let bytes = read(path)?;
    let font =
        FontRef::try_from_slice(bytes).map_err(|_| format!("{}: not a TrueType/OpenType font", path.display()))?;
    // Also known to plotters, so its own text elements work on bitmaps too.
    let _ = plotters::style::register_font(FAMILY, style, bytes);
    Ok(font)
}

/// Loads `explicit`, or the first candidate that exists, for PNG text (and
/// its bold sibling for titles when there is one). Errs with why there is
/// no font, for the report to say.
pub fn install(explicit: Option<&Path>) -> Result<RasterFonts, String> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => CANDIDATES.iter().map(PathBuf::from).find(|p| p.is_file()).ok_or_else(|| {
            format!(
                "no TrueType font found (looked for {}); install fonts-dejavu-core or pass --font FILE.ttf",
                CANDIDATES.join(", ")
            )
        })?,
    };
    let regular = load(&path, FontStyle::Normal)?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let bold_path = path.with_file_name(format!("{}-Bold.ttf", name.trim_end_matches("-Regular")));
    let bold = if bold_path.is_file() { load(&bold_path, FontStyle::Bold).ok() } else { None };
    Ok(RasterFonts { bold: bold.unwrap_or_else(|| regular.clone()), regular, path })
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
