"""Synthetic sessions for the ingest benchmark: English and Korean, from templates, deterministic for a
seed (ids included)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

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


def synthetic_sessions(
    count: int,
    *,
    users: int,
    turns: int = 8,
    korean_share: float = 0.4,
    seed: int = 7,
    tenant_id: str = BENCH_TENANT,
    now: datetime | None = None,
) -> list[SessionCompleted]:
    """`count` sessions spread over `users` users, a `korean_share` of them in Korean; deterministic
    for a seed (ids included), dated over the last 90 days before `now`."""
    if count < 1 or users < 1 or turns < 2:
        raise ValueError("need count >= 1, users >= 1 and turns >= 2")
    rng = random.Random(seed)
    end = (now or datetime.now(UTC)).replace(microsecond=0)
    sessions: list[SessionCompleted] = []
    for number in range(count):
        korean = rng.random() < korean_share
        lines = _korean_turns(rng, turns) if korean else _english_turns(rng, turns)
        ended = end - timedelta(minutes=rng.randint(0, 90 * 24 * 60))
        started = ended - timedelta(minutes=turns)
        user = f"u{number % users}"
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
