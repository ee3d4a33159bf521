"""KeywordEncoder: English and Korean terms, stable hashing, document and query weights."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.common.gateways import kiwi
from services.common.gateways.keywords import BIGRAM_MARK, KeywordEncoder, term_index
from services.common.stores.vector.port import SparseVector


@pytest.fixture(scope="module")
def encoder() -> KeywordEncoder:
    built = KeywordEncoder()
    built.warm_up()
    return built


def _matches(query: SparseVector, document: SparseVector) -> set[int]:
    return set(query.indices) & set(document.indices)


def test_term_index_is_pinned_and_31_bit() -> None:
    # Stored sparse vectors depend on these numbers: changing the hash silently breaks every index.
    assert term_index("서울") == 1174803849
    assert term_index("paris") == 2137040322
    assert all(0 <= term_index(term) < 2**31 for term in ("a", "온비서", "#서울", "x" * 1000))


def test_term_index_does_not_depend_on_the_process_hash_seed() -> None:
    script = "from services.common.gateways.keywords import term_index; print(term_index('서울'), term_index('paris'))"
    outputs = set()
    for seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            cwd=os.getcwd(),
        )
        outputs.add(result.stdout.strip())
    assert outputs == {"1174803849 2137040322"}


def test_english_normalises_drops_stopwords_and_plurals(encoder: KeywordEncoder) -> None:
    words = ["meeting", "moved", "paris"]
    assert encoder.tokens("The MEETINGS were moved to Paris, weren't they?") == [*words, "~meet", "~move", "~pari"]
    # NFKC folds full-width letters; casefold handles non-ASCII case; only a-z words get a stem term.
    assert encoder.tokens("Ｚｏｒｂｌａｘ CAFÉ") == ["zorblax", "café", "~zorblax"]
    assert encoder.tokens("batteries cats") == ["battery", "cat", "~batteri", "~cat"]


def test_english_keeps_digits_and_drops_single_letters(encoder: KeywordEncoder) -> None:
    assert encoder.tokens("GPT-4 has a 3 x speedup") == ["gpt", "4", "3", "speedup", "~gpt", "~speedup"]


def test_korean_particles_and_endings_are_stripped(encoder: KeywordEncoder) -> None:
    tokens = encoder.tokens("사용자는 서울에서 부산으로 이사할 계획이다.")
    assert {"서울", "부산", "이사", "계획"} <= set(tokens)
    assert not any(token.endswith(("에서", "으로", "는")) for token in tokens)
    document = encoder.encode_document("사용자는 서울에서 부산으로 이사할 계획이다.")
    assert _matches(encoder.encode_query("서울"), document)
    assert _matches(encoder.encode_query("부산"), document)


def test_korean_predicates_become_dictionary_forms(encoder: KeywordEncoder) -> None:
    assert "마시다" in encoder.tokens("카페에서 아메리카노를 마셨어")
    assert "마시다" in encoder.tokens("커피를 마시는 중")
    # Ubiquitous predicates carry no keyword evidence.
    assert encoder.tokens("했습니다 있었어요 됐어") == []


def test_korean_bigrams_catch_proper_nouns_kiwi_splits(encoder: KeywordEncoder) -> None:
    # Kiwi reads "온비서" as 오다 + 비서 ("secretary who came"); the bigram "#온비" keeps the name findable
    # and distinguishes it from any other 비서.
    tokens = encoder.tokens("온비서 프로젝트의 출시일이 다음 달 15일로 정해졌다.")
    assert f"{BIGRAM_MARK}온비" in tokens
    assert f"{BIGRAM_MARK}온비" in encoder.tokens("온비서 출시 언제야?")
    assert f"{BIGRAM_MARK}온비" not in encoder.tokens("새 비서를 뽑았다")


def test_korean_bigrams_never_come_from_particles_or_endings(encoder: KeywordEncoder) -> None:
    tokens = encoder.tokens("회의는 내일 했습니다. 서울에서 만났습니다.")
    bigrams = {token for token in tokens if token.startswith(BIGRAM_MARK)}
    assert not bigrams & {f"{BIGRAM_MARK}{pair}" for pair in ("니다", "습니", "에서", "의는", "울에")}
    # A two-syllable noun is already a term; its single bigram would only double-count it.
    assert f"{BIGRAM_MARK}서울" not in tokens


def test_chat_noise_yields_no_terms(encoder: KeywordEncoder) -> None:
    assert encoder.tokens("ㅇㅋ ㅋㅋㅋ") == []
    assert encoder.encode_query("ok thanks!") == SparseVector(indices=[], values=[])
    assert encoder.encode_document("") == SparseVector(indices=[], values=[])


def test_mixed_korean_and_english(encoder: KeywordEncoder) -> None:
    tokens = encoder.tokens("온비서는 API를 GPT-4로 바꿨어요")
    assert {"api", "gpt", "4", "바꾸다"} <= set(tokens)


def test_query_values_are_one_per_distinct_term(encoder: KeywordEncoder) -> None:
    query = encoder.encode_query("Paris paris PARIS trip")
    assert query.values == [1.0] * 4
    assert query.indices == sorted({term_index(t) for t in ("paris", "trip", "~pari", "~trip")})


def test_a_word_meets_its_other_forms_through_its_stem_term(encoder: KeywordEncoder) -> None:
    """ "who fixed the bug" and "the fix is merged": one stem term in common, and a word written the
    same way still counts more than one that only shares its stem."""
    query = set(encoder.encode_query("who fixed the bug").indices)
    fix = encoder.encode_document("the fix is merged")
    fixed = encoder.encode_document("the fixed one is merged")

    def matched(document: SparseVector) -> float:
        return sum(value for index, value in zip(document.indices, document.values, strict=True) if index in query)

    assert query & set(fix.indices) == {term_index("~fix")}
    assert 0 < matched(fix) < matched(fixed)
    weights = dict(zip(fixed.indices, fixed.values, strict=True))
    assert weights[term_index("fixed")] == pytest.approx(0.25 * weights[term_index("~fix")])  # 0.2 : 0.8
    assert set(encoder.encode_document("파리 여행").indices).isdisjoint({term_index("~pari")})


def test_document_weights_saturate_with_frequency(encoder: KeywordEncoder) -> None:
    k1 = 1.2
    once = encoder.encode_document("paris " + "filler " * 9)
    thrice = encoder.encode_document("paris paris paris " + "filler " * 7)
    paris = term_index("paris")
    weight_once = once.values[once.indices.index(paris)]
    weight_thrice = thrice.values[thrice.indices.index(paris)]
    assert weight_once < weight_thrice < k1 + 1.0
    assert weight_thrice < 3 * weight_once


def test_document_weights_normalise_length(encoder: KeywordEncoder) -> None:
    paris = term_index("paris")
    short = encoder.encode_document("paris trip")
    long = encoder.encode_document("paris " + " ".join(f"word{i}" for i in range(200)))
    assert short.values[short.indices.index(paris)] > long.values[long.indices.index(paris)]


def test_documents_are_sorted_unique_and_deterministic(encoder: KeywordEncoder) -> None:
    text = "서울 서울에서 Seoul seoul 회의실 회의"
    first = encoder.encode_document(text)
    assert first.indices == sorted(set(first.indices))
    assert len(first.indices) == len(first.values)
    assert all(value > 0 for value in first.values)
    assert encoder.encode_document(text) == first


def test_bigrams_weigh_less_than_morphemes_in_documents() -> None:
    encoder = KeywordEncoder(bigram_weight=0.5)
    document = encoder.encode_document("아메리카노")
    weights = dict(zip(document.indices, document.values, strict=True))
    assert weights[term_index(f"{BIGRAM_MARK}아메")] == pytest.approx(0.5 * weights[term_index("아메리카노")])


def test_encoder_is_thread_safe(encoder: KeywordEncoder) -> None:
    texts = ["온비서 출시 언제야?", "서울에서 부산으로 이사", "Alice moved to Seoul", "민수는 매운 음식을 싫어해"] * 25
    expected = [encoder.encode_document(text) for text in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(encoder.encode_document, texts)) == expected


def test_encoders_share_the_process_kiwi(encoder: KeywordEncoder) -> None:
    # Loading Kiwi costs seconds and hundreds of MB: a second encoder must not load another one.
    loaded = kiwi.shared_kiwi()
    KeywordEncoder().warm_up()
    assert kiwi.shared_kiwi() is loaded
    assert KeywordEncoder().tokens("서울에서") == encoder.tokens("서울에서")


def test_invalid_parameters_are_rejected() -> None:
    with pytest.raises(ValueError):
        KeywordEncoder(b=1.5)
    with pytest.raises(ValueError):
        KeywordEncoder(avg_doc_terms=0)
    with pytest.raises(ValueError):
        KeywordEncoder(bigram_weight=0)
    with pytest.raises(ValueError):
        KeywordEncoder(stem_share=1.0)


def test_repeated_short_texts_are_analysed_once_and_callers_get_their_own_list(
    encoder: KeywordEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # L0 tokenises the same memory abstracts every turn; Kiwi must not run again for a text it has seen.
    analysed: list[str] = []
    real = kiwi.tokenize

    def counting(text: str) -> object:
        analysed.append(text)
        return real(text)

    monkeypatch.setattr(kiwi, "tokenize", counting)
    text = "민지는 캐시 테스트 전용 문장을 서울에서 썼다 (unit-7f3a)"
    first = encoder.tokens(text)
    first.append("mutated by a caller")
    second = encoder.tokens(text)
    assert len(analysed) == 1 and "mutated by a caller" not in second
    assert second == first[:-1] and "서울" in second
    long_text = "서울 " * 1_500  # beyond the cached length: analysed every time, never kept
    encoder.tokens(long_text)
    encoder.tokens(long_text)
    assert len(analysed) == 3
