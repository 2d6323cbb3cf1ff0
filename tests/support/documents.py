"""Small real documents for file tests: a PDF written by pypdf (text drawn by a content stream), a DOCX written by
python-docx, and a PDF broken on purpose."""

from __future__ import annotations

import io


def pdf_with_pages(pages: list[list[str]]) -> bytes:
    """A valid PDF, one page per item, each line of text drawn in Helvetica (pypdf extracts it back)."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    for lines in pages:
        page = writer.add_blank_page(width=612, height=792)
        escaped = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
        ops = ["BT", "/F1 11 Tf", "14 TL", "50 740 Td"] + [f"({line}) Tj T*" for line in escaped] + ["ET"]
        stream = DecodedStreamObject()
        stream.set_data("\n".join(ops).encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def malformed_pdf() -> bytes:
    """Starts like a PDF (its signature passes the type check) but has no readable structure."""
    return b"%PDF-1.7\n" + b"\x00garbage that is not a PDF object table\n" * 20 + b"%%EOF\n"


def docx_with(heading: str, paragraphs: list[str]) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading(heading, level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()
