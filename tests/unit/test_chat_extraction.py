"""The offline extractor on chat (issue 50), rule by rule: typed relations instead of `related_to`
(chose, switching_to, owns, works_at, lives_in, age, date, likes), pets and people typed from grammar
(a kind noun before a name, he/she after it), lowercase names, dropped subjects, Korean particles dropped."""

from __future__ import annotations

import pytest

from services.semantic_extractor.heuristic import heuristic_extract
from services.semantic_extractor.schema import ExtractionOutput, normalise_entity_type


def _run(text: str, language: str = "en", *, user: str | None = None) -> ExtractionOutput:
    return heuristic_extract(text, language, user_display_name=user, user_speaker_names=[user] if user else [])


def _types(output: ExtractionOutput) -> dict[str, str]:
    return {entity.name.casefold(): entity.type for entity in output.entities}


def _edges(output: ExtractionOutput) -> set[tuple[str, str, str]]:
    return {(r.source.casefold(), r.type, r.target.casefold()) for r in output.relations}


def _facts(output: ExtractionOutput) -> set[tuple[str, str, str]]:
    return {(f.subject.casefold(), f.attribute, f.value.casefold()) for f in output.facts}


# ---- Pets and people ------------------------------------------------------------------------------------


def test_my_dog_names_a_pet_the_speaker_owns_and_its_age() -> None:
    output = _run("Mina: my dog bori turned 3 today!!", user="Mina")
    assert _types(output)["bori"] == "pet"
    assert ("mina", "owns", "bori") in _edges(output)
    assert ("user", "has_pet", "dog") in _facts(output)
    assert ("bori", "age", "3") in _facts(output)
    assert not any(r.type == "related_to" for r in output.relations)


def test_her_name_after_an_adopted_animal_is_a_pet() -> None:
    output = _run("kai: we adopted a kitten!! her name is noodle")
    assert _types(output)["noodle"] == "pet"


def test_an_apposition_names_a_pet() -> None:
    assert _types(_run("ana: bori, my dog, ate my socks again"))["bori"] == "pet"
    assert _types(_run("ana: Coco (a rescue cat) is shy"))["coco"] == "pet"
    assert "pet" not in _types(_run("ana: thanks, a dog would be fun")).values()


def test_a_kind_noun_that_modifies_another_noun_names_no_pet() -> None:
    assert "food" not in _types(_run("kai: my dog food order is late"))
    assert not any(t == "pet" for t in _types(_run("kai: my dog loves walks")).values())


def test_a_relation_noun_before_a_lowercase_name_is_a_person_and_the_subject() -> None:
    output = _run("user: my sister yuna works at naver now")
    assert _types(output)["yuna"] == "person"
    assert ("yuna", "employer", "naver") in _facts(output)
    assert ("yuna", "works_at", "naver") in _edges(output)
    assert _types(_run("user: my mom said it was fine")).get("said") is None


def test_he_or_she_after_an_untyped_name_makes_it_a_person() -> None:
    output = _run("user: Priya pushed for pg in the review\nuser: she thinks mongo was a mistake")
    assert _types(output)["priya"] == "person"


def test_he_or_she_is_the_last_person_introduced() -> None:
    output = _run("user: fyi my son leo is allergic to eggs\nuser: he's 5 so he doesn't always remember")
    assert {("leo", "allergy", "eggs"), ("leo", "age", "5")} <= _facts(output)


def test_pet_is_a_type_the_llm_path_accepts_too() -> None:
    assert normalise_entity_type("Pet") == "pet" and normalise_entity_type("dog") == "pet"


# ---- Decisions, switches, owning, dates -------------------------------------------------------------------


def test_chose_y_for_z_is_an_edge_from_the_project_and_a_fact_naming_it() -> None:
    output = _run("Priya: we chose PostgreSQL 16 for Atlas\nPriya: MongoDB just didn't fit", user="Priya")
    assert ("atlas", "chose", "postgresql 16") in _edges(output)
    chose = [f for f in output.facts if f.attribute == "chose"]
    assert [(f.subject, f.value) for f in chose] == [("user", "PostgreSQL 16")]
    assert "for Atlas" in chose[0].text
    assert _types(output)["atlas"] == "project"


@pytest.mark.parametrize(
    "text",
    [
        "Ana: should we go with Redis for Orbit?",
        "Ana: if we picked Redis for Orbit it would be simpler",
        "Ana: we're not going with Redis",
        "Ana: thinking about switching to Redis",
        "Ana: going with Mia to the party",
    ],
)
def test_a_question_hedge_or_negation_decides_nothing(text: str) -> None:
    output = _run(text, user="Ana")
    assert not any(f.attribute == "chose" for f in output.facts)
    assert not any(r.type in {"chose", "switching_to"} for r in output.relations)


def test_switching_to_a_tool_is_typed_and_moving_house_is_not_a_switch() -> None:
    output = _run("Sam: switching CI to github actions this sprint", user="Sam")
    assert ("sam", "switching_to", "github actions") in _edges(output)
    done = _run("Sam: switched from Windows to macOS last month", user="Sam")
    assert not any(r.type == "switching_to" for r in done.relations), "a finished switch is plain use"
    moved = _run("Sam: moved to lisbon last month", user="Sam")
    assert ("user", "lives_in", "lisbon") in _facts(moved)
    assert not any(f.attribute == "switching_to" for f in moved.facts)


def test_dropped_subject_is_the_speaker() -> None:
    output = _run("jules: started at stripe last monday!!\njules: still in berlin tho, remote")
    assert {("jules", "employer", "stripe"), ("jules", "lives_in", "berlin")} <= _facts(output)
    assert {("jules", "works_at", "stripe"), ("jules", "lives_in", "berlin")} <= _edges(output)


def test_a_bare_lowercase_employer_counts_but_a_common_noun_does_not() -> None:
    assert ("chloe", "employer", "dell") in _facts(_run("chloe: working at dell now, the commute is fine"))
    assert not any(f.attribute == "employer" for f in _run("chloe: working at home now").facts)
    assert not any(f.attribute == "employer" for f in _run("chloe: i work at a bank").facts)


def test_owning_a_named_thing_and_the_date_of_an_event() -> None:
    output = _run("nico: picked up a used tesla yesterday 🚗\nnico: the launch party is on may 14")
    assert ("nico", "owns", "tesla") in _facts(output)
    assert ("launch party", "date", "may 14") in _facts(output)
    assert _types(output)["tesla"] == "organisation", "the gazetteer's type stands"


def test_we_use_is_an_edge_from_the_speaker_not_a_fact_about_them() -> None:
    output = _run("rob: we use Linear for tickets now\nrob: the team uses vscode", user="rob")
    assert {("rob", "uses", "linear"), ("rob", "uses", "vscode")} <= _edges(output)
    assert not any(f.attribute == "uses_tool" for f in output.facts), "a team habit, not the speaker's"


def test_a_liked_kind_of_thing_is_a_fact_not_a_node() -> None:
    for text, language in (
        ("I'm a huge fan of Studio Ghibli films.", "en"),
        ("I love jazz and hiking.", "en"),
        ("저는 달리기, 자전거, 수영을 좋아해요.", "ko"),
    ):
        output = _run(text, language)
        liked = {f.value.casefold() for f in output.facts if f.attribute == "likes"}
        assert liked and not liked & set(_types(output)), (text, _types(output))
    assert ("ana", "likes", "linear") in _edges(_run("ana: love Linear tbh", user="ana")), "a known tool is linked"


# ---- Korean ---------------------------------------------------------------------------------------------


def test_korean_pet_age_and_owner() -> None:
    output = _run("다은: 우리 강아지 초코 오늘 네 살 됐어", "ko", user="다은")
    assert _types(output)["초코"] == "pet"
    assert ("다은", "owns", "초코") in _edges(output)
    assert ("초코", "age", "4") in _facts(output)


def test_korean_pet_named_as_a_subject_is_not_a_person() -> None:
    output = _run("현우: 고양이 모모가 벌써 열두 살이야", "ko")
    assert _types(output)["모모"] == "pet"
    assert ("모모", "age", "12") in _facts(output)


def test_korean_decision_for_a_project_and_a_switch() -> None:
    decided = _run("준서: 프로젝트 오리온은 뷰 대신 리액트로 결정했어요", "ko")
    assert ("오리온", "chose", "리액트") in _edges(decided)
    assert ("준서", "chose", "리액트") in _facts(decided)
    switched = _run("하늘: 우리 팀 배포 깃랩으로 바꾸는 중", "ko", user="하늘")
    assert ("하늘", "switching_to", "깃랩") in _edges(switched)
    for done_or_not in (
        "회사도 부산 지사로 옮겨",
        "지난달에 깃랩으로 바꿨어요",
        "깃랩으로 바꿀까 고민 중이에요",
        "깃랩으로 갈아탈지도 몰라요",
    ):
        output = _run(f"하늘: {done_or_not}", "ko", user="하늘")
        assert not any(r.type == "switching_to" for r in output.relations), done_or_not


def test_korean_negated_decision_decides_nothing() -> None:
    output = _run("준서: 리액트로 결정 안 했어요", "ko")
    assert not any(f.attribute == "chose" for f in output.facts)


def test_korean_particles_dropped_in_chat() -> None:
    output = _run("user: 동생 지민이는 카카오 다녀요\nuser: 고수는 진짜 싫어\nuser: 떡볶이 엄청 좋아해", "ko")
    assert {("지민", "employer", "카카오"), ("user", "dislikes", "고수"), ("user", "likes", "떡볶이")} <= _facts(output)
    assert _types(output)["지민"] == "person"
