"""PII detection and redaction: each kind's positives and look-alikes, span merging, redaction text, no network."""

from __future__ import annotations

import itertools
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from functions.safety.pii import PiiDetector, PiiKind, PiiSpan, _merge_overlaps, pii_detector

FC_KEY = "fc-" + "Zq3_x-9Lm2Pp7Rt0Vw5Yb8Nc4Kd1Jh6Gf2Se"


def luhn_complete(body: str) -> str:
    """``body`` plus the check digit that makes it Luhn-valid."""
    total = 0
    for i, ch in enumerate(reversed(body)):
        digit = int(ch) * (2 if i % 2 == 0 else 1)
        total += digit - 9 if digit > 9 else digit
    return body + str((10 - total % 10) % 10)


@pytest.fixture(scope="module")
def detector() -> PiiDetector:
    return pii_detector()


def kinds(detector: PiiDetector, text: str) -> list[PiiKind]:
    return [span.kind for span in detector.find(text)]


def found(detector: PiiDetector, text: str) -> list[tuple[PiiKind, str]]:
    return [(span.kind, text[span.start : span.end]) for span in detector.find(text)]


@pytest.mark.parametrize(
    "email", ["john.doe@example.com", "j+tag@mail.co.uk", "first_last@sub.ex-ample.io", "jöhn@exämple.de"]
)
def test_emails_are_found_whole(detector: PiiDetector, email: str) -> None:
    assert found(detector, f"write to {email} today") == [(PiiKind.EMAIL, email)]


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("GET /v1/export?email=jane@example.com HTTP/1.1", "GET /v1/export?email=[EMAIL] HTTP/1.1"),
        ("mailto:jane@example.com", "mailto:[EMAIL]"),
        ("<jane.doe+tag@example.com>", "<[EMAIL]>"),
        ("a,b=o'brien@example.ie", "a,b=[EMAIL]"),
    ],
)
def test_emails_inside_urls_and_markup_are_cut_to_the_address(detector: PiiDetector, text: str, redacted: str) -> None:
    assert detector.redact(text) == redacted


@pytest.mark.parametrize("text", ["foo@bar.notatld", "ping @handle", "a@b", "user@localhost", "email me"])
def test_email_look_alikes_are_not_emails(detector: PiiDetector, text: str) -> None:
    assert kinds(detector, text) == []


@pytest.mark.parametrize(
    "phone",
    [
        "(415) 555-2671",
        "415-555-2671",
        "415.555.2671",
        "4155552671",
        "+1 415 555 2671",
        "+1-415-555-2671",
        "415\u2013555\u20132671",
        "+44 20 7946 0958",
        "020 7946 0958",
        "+49 30 901820",
        "+33 1 42 68 53 00",
        "+91 98765 43210",
    ],
)
def test_phones_are_found_in_us_and_international_formats(detector: PiiDetector, phone: str) -> None:
    assert found(detector, f"call me on {phone} tomorrow") == [(PiiKind.PHONE, phone)]


def test_a_list_of_phone_numbers_one_per_line_is_redacted_line_by_line(detector: PiiDetector) -> None:
    text = "contacts:\n415-555-2671\n415-555-2672\n+44 20 7946 0958\n"
    assert detector.redact(text) == "contacts:\n[PHONE]\n[PHONE]\n[PHONE]\n"


def test_a_national_number_after_an_international_one_is_found(detector: PiiDetector) -> None:
    assert detector.redact("ring +44 20 7946 0958 / 020 7946 0958") == "ring [PHONE] / [PHONE]"


@pytest.mark.parametrize(
    "text",
    [
        "order 12345 shipped",
        "it costs 1500 dollars",
        "call 911 now",  # emergency and short codes are not anyone's number
        "logged at 2024-01-15 10:30:00",
        "in the year 2023",
        "zip 94103-1234",
        "pi is 3.14159265",
        "release v1.2.3.4",
        "page 1234567",
        "id abc4155552671",  # glued to letters: an identifier, not a number
    ],
)
def test_plain_numbers_dates_and_versions_are_not_phones(detector: PiiDetector, text: str) -> None:
    assert PiiKind.PHONE not in kinds(detector, text)


@pytest.mark.parametrize(
    "card",
    [
        "4111111111111111",
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "5555555555554444",
        "2223003122003222",  # Mastercard 2-series
        "378282246310005",  # Amex, 15 digits
        "3782 822463 10005",
        "6011111111111117",
        "4222222222222",  # 13 digits
        luhn_complete("601100099013942412"),  # 19 digits
    ],
)
def test_luhn_valid_cards_are_found(detector: PiiDetector, card: str) -> None:
    assert found(detector, f"card {card} exp 12/29") == [(PiiKind.CARD, card)]


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # Luhn-invalid
        "card 4111111111111112",
        "card 5555555555554445",
        "id " + luhn_complete("123456789012345"),  # Luhn-valid but no card network starts with 1
    ],
)
def test_luhn_invalid_or_non_card_numbers_are_not_cards(detector: PiiDetector, text: str) -> None:
    assert PiiKind.CARD not in kinds(detector, text)


def test_a_card_followed_by_its_cvv_is_still_found(detector: PiiDetector) -> None:
    assert detector.redact("4111 1111 1111 1111 123") == "[CARD] 123"


@pytest.mark.parametrize(
    "address", ["192.168.1.10", "10.0.0.0/8", "8.8.8.8", "2001:db8::1", "fe80::1ff:fe23:4567:890a", "::ffff:10.0.0.1"]
)
def test_ip_addresses_are_found(detector: PiiDetector, address: str) -> None:
    assert found(detector, f"from {address} today") == [(PiiKind.IP, address)]


@pytest.mark.parametrize("text", ["999.1.1.1", "the :: operator", "at 12:30:45", "1.2.3", "std::vector"])
def test_ip_look_alikes_are_not_ips(detector: PiiDetector, text: str) -> None:
    assert PiiKind.IP not in kinds(detector, text)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"my key is {FC_KEY}", FC_KEY),
        ("key sk-abc123DEF456ghi789JKL012mno345PQR678stu901 ok", "sk-abc123DEF456ghi789JKL012mno345PQR678stu901"),
        ("key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t ok", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"),
        ("id AKIAIOSFODNN7EXAMPLE ok", "AKIAIOSFODNN7EXAMPLE"),
        ("id ASIAY34FZKBOKMUTVV7A ok", "ASIAY34FZKBOKMUTVV7A"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        ("token ghp_" + "a1B2" * 9 + " ok", "ghp_" + "a1B2" * 9),
        ("token gho_" + "Z9y8" * 9 + " ok", "gho_" + "Z9y8" * 9),
        ("token ghs_" + "Q7w6" * 9 + " ok", "ghs_" + "Q7w6" * 9),
        ("token github_pat_" + "11AB" * 8 + "_x ok", "github_pat_" + "11AB" * 8 + "_x"),
        ("slack xoxb-123456789012-1234567890123-AbCdEf ok", "xoxb-123456789012-1234567890123-AbCdEf"),
        ("slack xoxp-98765432109-abcdefghij ok", "xoxp-98765432109-abcdefghij"),
        ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc ok", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        ("stripe sk_test_4eC39HqLyjWDarjtT1zdp7dc ok", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
        ("stripe rk_live_51Hx2aBcDeFgHiJkLmNo ok", "rk_live_51Hx2aBcDeFgHiJkLmNo"),
        ("maps AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY ok", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvwxyz0123"),
        ("password=hunter2 ok", "hunter2"),
        ('DB_PASSWORD="correcthorse" ok', "correcthorse"),
        ('{"client_secret": "abcdefgh"}', "abcdefgh"),
        ("api_key: 9f8e7d6c5b4a ok", "9f8e7d6c5b4a"),
        ("Password: P@ssw0rd! ok", "P@ssw0rd!"),
    ],
)
def test_each_secret_format_is_found(detector: PiiDetector, text: str, secret: str) -> None:
    assert found(detector, text) == [(PiiKind.SECRET, secret)]


def test_pem_private_keys_are_found_whole_or_cut_off(detector: PiiDetector) -> None:
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4+/abc=\nQ29mZmVl\n-----END RSA PRIVATE KEY-----"
    assert detector.redact(f"key:\n{block}\nthanks") == "key:\n[SECRET]\nthanks"
    # The streaming filter's window can end inside the block.
    assert detector.redact("here\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA") == "here\n[SECRET]"


@pytest.mark.parametrize(
    "text",
    [
        "pip install scikit-learn; sk-learn is a nickname",
        "a risk-averse-strategy-for-everyone-involved",
        "sk-abcdefghijklmnopqrstuvwxyz",  # no digit: prose with hyphens, not a key
        "max_tokens=256 prompt_tokens: 12 completion_tokens=30",
        "the secret: patience. the password: is it safe?",
        "ghp_short",
        "AKIA1234",
        "if password == expected:",
    ],
)
def test_secret_look_alikes_are_not_secrets(detector: PiiDetector, text: str) -> None:
    assert PiiKind.SECRET not in kinds(detector, text)


@pytest.mark.parametrize("ssn", ["536-22-1234", "536 22 1234", "536.22.1234"])
def test_ssns_are_found(detector: PiiDetector, ssn: str) -> None:
    assert found(detector, f"ssn {ssn} ok") == [(PiiKind.SSN, ssn)]


@pytest.mark.parametrize(
    "text",
    [
        "000-12-3456",  # area 000 is never issued
        "666-12-3456",
        "912-34-5678",  # 9xx is an ITIN
        "536-00-1234",
        "536-22-0000",
        "536-22 1234",  # mixed delimiters
        "536221234",  # bare 9 digits: too weak on its own
        "123-45-6789",  # the published sample
    ],
)
def test_invalid_or_ambiguous_ssns_are_not_ssns(detector: PiiDetector, text: str) -> None:
    assert PiiKind.SSN not in kinds(detector, text)


def test_redact_replaces_each_span_with_its_placeholder(detector: PiiDetector) -> None:
    text = (
        "Hi, I'm Jane (jane@example.com, +1 415 555 2671). Card 4111 1111 1111 1111, "
        f"server 10.0.0.7, ssn 536-22-1234, key {FC_KEY}."
    )
    assert detector.redact(text) == (
        "Hi, I'm Jane ([EMAIL], [PHONE]). Card [CARD], server [IP], ssn [SSN], key [SECRET]."
    )


def test_text_without_pii_is_returned_unchanged(detector: PiiDetector) -> None:
    text = "Transformers use self-attention; version 3.11 shipped in 2023 with 128 layers at 45.2 ms."
    assert detector.find(text) == []
    assert detector.redact(text) is text
    assert detector.contains_pii(text) is None


def test_empty_text(detector: PiiDetector) -> None:
    assert detector.find("") == []
    assert detector.redact("") == ""
    assert detector.contains_pii("") is None


def test_unicode_text_keeps_its_characters_and_offsets(detector: PiiDetector) -> None:
    text = "naïve café — 日本語 ✉ jöhn@exämple.de ☎ +49 30 901820 🙂"
    assert detector.redact(text) == "naïve café — 日本語 ✉ [EMAIL] ☎ [PHONE] 🙂"


def test_contains_pii_names_the_first_kind_in_the_text(detector: PiiDetector) -> None:
    assert detector.contains_pii("ssn 536-22-1234 and jane@example.com") == PiiKind.SSN
    assert detector.contains_pii("jane@example.com and ssn 536-22-1234") == PiiKind.EMAIL
    assert detector.contains_pii(f"the key is {FC_KEY}") == PiiKind.SECRET


def test_spans_are_sorted_and_never_overlap(detector: PiiDetector) -> None:
    text = "+49 301 23 4567, 4111111111111111 10.0.0.1 jane@example.com 536-22-1234 " * 3
    spans = detector.find(text)
    assert spans
    assert all(a.end <= b.start for a, b in itertools.pairwise(spans))


def test_overlaps_merge_into_the_best_match_over_their_union() -> None:
    spans = [
        PiiSpan(PiiKind.PHONE, 0, 15, 0.4),
        PiiSpan(PiiKind.SSN, 4, 15, 0.5),
        PiiSpan(PiiKind.EMAIL, 20, 30, 1.0),
        PiiSpan(PiiKind.IP, 30, 35, 0.6),  # touches the email, does not overlap it
    ]
    assert _merge_overlaps(spans) == [
        PiiSpan(PiiKind.SSN, 0, 15, 0.5),
        PiiSpan(PiiKind.EMAIL, 20, 30, 1.0),
        PiiSpan(PiiKind.IP, 30, 35, 0.6),
    ]


def test_an_overlap_between_kinds_redacts_every_character(detector: PiiDetector) -> None:
    # The SSN pattern (score 0.5) matches inside the phone number (0.4): the SSN wins, the "+49" goes too.
    assert detector.redact("call +49 301 23 4567 now") == "call [SSN] now"


def test_an_8_kb_text_is_redacted_completely(detector: PiiDetector) -> None:
    filler = "The KV cache keeps keys and values, so decoding 128 tokens at 45.2 ms each stays cheap. "
    chunk = filler + "Mail jane@example.com or call +1 415 555 2671; card 4111-1111-1111-1111. "
    text = (chunk * (8192 // len(chunk) + 1))[:8192]
    redacted = detector.redact(text)
    assert "jane@example.com" not in redacted
    assert "555 2671" not in redacted
    assert "4111-1111" not in redacted
    complete = text.count(chunk)
    assert redacted.count("[EMAIL]") >= complete
    assert redacted.count("[PHONE]") >= complete
    assert redacted.count("[CARD]") >= complete


def test_the_shared_detector_is_built_once_and_usable_from_threads(detector: PiiDetector) -> None:
    assert pii_detector() is detector
    text = "jane@example.com +1 415 555 2671 4111 1111 1111 1111 10.0.0.1 536-22-1234 " + FC_KEY
    expected = detector.find(text)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(detector.find, [text] * 64))
    assert all(result == expected for result in results)


def test_building_and_using_a_detector_does_no_network_io(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("PII detection tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    with socket.socket() as probe, pytest.raises(AssertionError):
        probe.connect(("127.0.0.1", 9))  # the guard is in place

    fresh = PiiDetector()
    assert fresh.redact("mail jane@example.com, j@mail.co.uk or x@bar.notatld") == (
        "mail [EMAIL], [EMAIL] or x@bar.notatld"
    )
