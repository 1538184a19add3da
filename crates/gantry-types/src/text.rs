//! Which characters a name may hold and a terminal may be sent: the one rule the spec reader
//! checks names by and every listing escapes stored text by.

/// Printable: not a control character, not a line or paragraph separator, and none of
/// Unicode's default-ignorable code points (DerivedCoreProperties.txt, Unicode 15.1: soft
/// hyphen, joiners, fillers, variation selectors, tags — characters a terminal draws as
/// nothing) nor its bidirectional controls (PropList.txt `Bidi_Control`: the marks, embeddings,
/// overrides and isolates that reorder what is shown around them). A name with one would look
/// like another name, or make a listing lie.
pub fn printable(c: char) -> bool {
    !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}') && !default_ignorable(c)
}

/// Unicode's `Default_Ignorable_Code_Point` (which holds every `Bidi_Control` but U+061C's
/// neighbours as well: 061C, 200E–200F, 202A–202E, 2066–2069 are all in it).
fn default_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}
