"""Synthetic sessions for the ingest benchmark: English and Korean, from templates, deterministic for a
seed (ids included)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Literal

from contracts import SessionCompleted
from services.common.domain.ids import deterministic_uuid

BENCH_TENANT = "bench"

_PEOPLE_EN = ["Minsu", "Sarah", "Jiwon", "Tom", "Hana", "Carlos", "Yuki", "Priya"]
_PEOPLE_KO = ["김민수", "이서연", "박지훈", "최유나", "정하늘", "강태양"]
_PROJECTS = ["DGIA", "Onbiseo", "Atlas", "Nimbus", "Orion", "Kestrel", "Helix", "온비서", "한빛", "누리"]
_COMPONENTS_EN = ["billing service", "search index", "mobile app", "data pipeline", "auth gateway", "ingest workers"]
_COMPONENTS_KO = ["결제 모듈", "검색 엔진", "배포 파이프라인", "알림 서버", "정산 배치", "관리자 화면"]
_TECH = ["Go", "Rust", "Kotlin", "Postgres", "Kafka", "Redis", "Kubernetes", "TypeScript"]
_CITIES_EN = ["Seoul", "Busan", "Berlin", "Lisbon", "Osaka", "Toronto"]
_CITIES_KO = ["서울", "부산", "제주", "대전", "광주", "강릉"]
_FOODS_EN = ["spicy food", "sushi", "coffee after 3 pm", "peanuts", "dairy"]
_FOODS_KO = ["매운 음식", "회", "오후 커피", "땅콩", "우유"]


def _english_turns(rng: random.Random, turns: int) -> list[tuple[str, str]]:
    person, project, component = rng.choice(_PEOPLE_EN), rng.choice(_PROJECTS), rng.choice(_COMPONENTS_EN)
    tech, city, food = rng.choice(_TECH), rng.choice(_CITIES_EN), rng.choice(_FOODS_EN)
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    lines = [
        ("user", f"We decided to rewrite the {project} {component} in {tech}; {person} owns the migration."),
        ("assistant", f"Noted: the {project} {component} moves to {tech}, owned by {person}. Any deadline?"),
        ("user", f"The deadline is {month}/{day}. I also moved to {city} last month, so I work remotely now."),
        ("assistant", f"Got it. Should I plan reviews for the {component} around your time zone in {city}?"),
        ("user", f"Yes please. By the way, I can't have {food}, keep that in mind for the team dinner."),
        ("assistant", f"I'll remember that you avoid {food}. Anything else for the {project} plan?"),
        ("user", f"Open task: {person} still has to load-test the {component} before the release."),
        ("assistant", f"Added: {person} load-tests the {project} {component} before release."),
    ]
    return [lines[i % len(lines)] for i in range(turns)]


def _korean_turns(rng: random.Random, turns: int) -> list[tuple[str, str]]:
    person, project, component = rng.choice(_PEOPLE_KO), rng.choice(_PROJECTS), rng.choice(_COMPONENTS_KO)
    tech, city, food = rng.choice(_TECH), rng.choice(_CITIES_KO), rng.choice(_FOODS_KO)
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    lines = [
        ("user", f"{project} {component}은 {tech}로 다시 작성하기로 했어. 이전 작업은 {person} 님이 맡아."),
        ("assistant", f"정리하면 {project} {component}을 {tech}로 바꾸고 {person} 님이 담당하시는 거죠. 마감은요?"),
        ("user", f"마감은 {month}월 {day}일이야. 그리고 지난달에 {city}로 이사해서 요즘은 원격으로 일해."),
        ("assistant", f"알겠습니다. {city} 기준으로 {component} 리뷰 일정을 잡을까요?"),
        ("user", f"응, 그리고 나 {food}은 못 먹으니까 팀 회식 장소 고를 때 참고해 줘."),
        ("assistant", f"{food}은 피하신다는 것 기억해 둘게요. {project} 계획에 더 추가할 게 있나요?"),
        ("user", f"남은 일: 출시 전에 {person} 님이 {component} 부하 테스트를 해야 해."),
        ("assistant", f"추가했습니다: 출시 전 {person} 님이 {project} {component} 부하 테스트."),
    ]
    return [lines[i % len(lines)] for i in range(turns)]


# ---- LoCoMo-shaped sessions: 20-30 chatty turns of 1-3 sentences (LoCoMo's sizes), invented text --
SessionShape = Literal["short", "locomo"]
LOCOMO_TURNS = (20, 30)
_HOBBIES_EN = ["pottery", "bouldering", "film photography", "baking sourdough", "running", "the violin"]
_HOBBIES_KO = ["도자기", "클라이밍", "필름 사진", "베이킹", "달리기", "바이올린"]
_CHAT_EN = [
    "Hey, good to hear from you! How was your week?",
    "It was busy but fun, I finally signed up for a {hobby} class with {person}.",
    "That sounds amazing, I remember you wanted to try {hobby} for ages.",
    "We went to {city} over the weekend and the weather was perfect.",
    "Work on {project} has been intense, the {component} keeps us up late.",
    "{person} is switching the {component} to {tech} and I am reviewing the design.",
    "I can't have {food}, so the team picked a different place for dinner.",
    "My sister just adopted a puppy and now sends me photos every hour.",
    "Honestly I needed a break, so I read on the balcony all Sunday.",
    "Did you ever finish the book you told me about last month?",
    "The deadline for {project} moved to {month}/{day}, which gives us some air.",
    "I'm thinking of taking {hobby} more seriously and maybe joining a club in {city}.",
    "That's so thoughtful of you, thanks for remembering.",
    "We should catch up properly soon, maybe coffee next Friday?",
    "Yes! Let me know how the {hobby} class goes.",
    "I felt nervous presenting the {component} plan, but {person} said it went well.",
    "I moved to {city} last year, so I work remotely now.",
    "I am allergic to {food}.",
    "I work as a {job} these days.",
    "My sister {person} lives in {city}.",
    "I have a dog named {pet}.",
    "I prefer tea over coffee in the afternoon.",
]
_JOBS_EN = ["nurse", "data engineer", "teacher", "product designer"]
_JOBS_KO = ["간호사", "데이터 엔지니어", "교사", "디자이너"]
_PETS = ["Max", "Bori", "Coco", "Luna"]
_CHAT_KO = [
    "안녕! 오랜만이야, 이번 주는 어땠어?",
    "바빴지만 재밌었어. {person} 님이랑 {hobby} 수업을 드디어 신청했어.",
    "좋다, 예전부터 {hobby} 해 보고 싶다고 했잖아.",
    "주말에 {city}에 다녀왔는데 날씨가 정말 좋았어.",
    "{project} 일이 요즘 정신없어. {component} 때문에 늦게까지 일해.",
    "{person} 님이 {component}을 {tech}로 바꾸고 있어서 설계를 검토 중이야.",
    "나는 {food}을 못 먹어서 팀 회식 장소를 바꿨어.",
    "동생이 강아지를 입양해서 매시간 사진을 보내.",
    "쉬고 싶어서 일요일 내내 베란다에서 책을 읽었어.",
    "{project} 마감이 {month}월 {day}일로 미뤄져서 조금 여유가 생겼어.",
    "{hobby}를 좀 더 진지하게 해 볼까 해. {city}에 있는 동호회도 알아보고 있어.",
    "기억해 줘서 고마워, 정말 다정하다.",
    "다음 주 금요일에 커피 한잔 하면서 제대로 얘기하자.",
    "{component} 계획 발표가 떨렸는데 {person} 님이 잘했다고 해 줬어.",
    "작년에 {city}로 이사했어.",
    "나는 {food} 알레르기가 있어.",
    "나는 {job}로 일해.",
    "나는 {food}을 좋아해.",
]


def _chatty_turns(rng: random.Random, persona: random.Random, turns: int, korean: bool) -> list[tuple[str, str]]:
    """Alternating turns of 1-3 sentences drawn from the chat templates. The user's own facts (city,
    food, job, pet...) come from `persona`, the same for every session of a user, so facts recur
    across sessions as they do in LoCoMo; the rest is drawn per session."""
    slots = {
        "person": persona.choice(_PEOPLE_KO if korean else _PEOPLE_EN),
        "city": persona.choice(_CITIES_KO if korean else _CITIES_EN),
        "food": persona.choice(_FOODS_KO if korean else _FOODS_EN),
        "hobby": persona.choice(_HOBBIES_KO if korean else _HOBBIES_EN),
        "job": persona.choice(_JOBS_KO if korean else _JOBS_EN),
        "pet": persona.choice(_PETS),
        "project": rng.choice(_PROJECTS),
        "component": rng.choice(_COMPONENTS_KO if korean else _COMPONENTS_EN),
        "tech": rng.choice(_TECH),
        "month": rng.randint(1, 12),
        "day": rng.randint(1, 28),
    }
    templates = _CHAT_KO if korean else _CHAT_EN
    lines: list[tuple[str, str]] = []
    for turn in range(turns):
        sentences = rng.sample(templates, rng.randint(1, 3))
        lines.append(("user" if turn % 2 == 0 else "assistant", " ".join(t.format(**slots) for t in sentences)))
    return lines


def _session_lines(
    rng: random.Random, shape: SessionShape, turns: int, korean: bool, persona: str
) -> list[tuple[str, str]]:
    if shape == "locomo":
        return _chatty_turns(rng, random.Random(persona), rng.randint(*LOCOMO_TURNS), korean)
    return _korean_turns(rng, turns) if korean else _english_turns(rng, turns)


def synthetic_sessions(
    count: int,
    *,
    users: int,
    turns: int = 8,
    korean_share: float = 0.4,
    seed: int = 7,
    tenant_id: str = BENCH_TENANT,
    now: datetime | None = None,
    shape: SessionShape = "short",
) -> list[SessionCompleted]:
    """`count` sessions spread over `users` users, a `korean_share` of them in Korean; deterministic
    for a seed (ids included), dated over the last 90 days before `now`. `shape="short"` gives `turns`
    templated work turns; `"locomo"` gives 20-30 chatty turns of 1-3 sentences (`turns` ignored)."""
    if count < 1 or users < 1 or turns < 2:
        raise ValueError("need count >= 1, users >= 1 and turns >= 2")
    rng = random.Random(seed)
    end = (now or datetime.now(UTC)).replace(microsecond=0)
    sessions: list[SessionCompleted] = []
    for number in range(count):
        korean = rng.random() < korean_share
        user = f"u{number % users}"
        lines = _session_lines(rng, shape, turns, korean, persona=f"{seed}-{user}")
        ended = end - timedelta(minutes=rng.randint(0, 90 * 24 * 60))
        started = ended - timedelta(minutes=len(lines))
        sessions.append(
            SessionCompleted.model_validate(
                {
                    "event_id": deterministic_uuid("bench-ingest", str(seed), str(number)),
                    "tenant_id": tenant_id,
                    "user_id": user,
                    "agent_id": "bench-agent",
                    "session_id": f"s{seed}-{number}",
                    "channel": "private",
                    "started_at": started,
                    "ended_at": ended,
                    "locale": "ko" if korean else "en",
                    "messages": [{"role": role, "content": text} for role, text in lines],
                }
            )
        )
    return sessions


# ---- live questions: what a user asks next turn, about the short sessions' topics ---------------
_QUESTIONS_EN = [
    "what did we decide about the {project} {component}?",
    "who owns the {project} {component} migration again?",
    "when is the {project} {component} due, {month}/{day} or later?",
    "is {person} still load-testing the {component} for {project}?",
    "did we move the {project} {component} to {tech} in the end?",
    "what can't I eat at the dinner in {city}?",
]
_QUESTIONS_KO = [
    "{project} {component} 그거 어떻게 됐어?",
    "{project} {component} 담당이 {person} 님 맞지?",
    "{project} {component} 마감이 {month}월 {day}일이었나?",
    "{component} 부하 테스트는 {person} 님이 하는 거지?",
    "{project} {component}을 {tech}로 옮기기로 한 거 맞아?",
]


def live_question(rng: random.Random, korean_share: float = 0.4) -> str:
    """One question about the topics `synthetic_sessions` talks about, in English or Korean (the dated
    templates alone have over 20k forms; `DistinctQuestions` in load.py skips repeats)."""
    korean = rng.random() < korean_share
    slots = {
        "project": rng.choice(_PROJECTS),
        "component": rng.choice(_COMPONENTS_KO if korean else _COMPONENTS_EN),
        "person": rng.choice(_PEOPLE_KO if korean else _PEOPLE_EN),
        "tech": rng.choice(_TECH),
        "city": rng.choice(_CITIES_EN),
        "month": rng.randint(1, 12),
        "day": rng.randint(1, 28),
    }
    return rng.choice(_QUESTIONS_KO if korean else _QUESTIONS_EN).format(**slots)
